"""NPPP's distinctiveness peaks, bit for bit: float32 pooling and bilinear upsampling as torch's
CPU kernels compute them, then the first strict maximum.

NPPP ``eval/distinctiveness.py`` runs ``F.avg_pool2d`` (pool 2), ``F.interpolate(mode="bilinear")``
and ``F.adaptive_max_pool2d(return_indices=True)`` on float32 maps. Where a maximum is flat or two
pixels differ by float32 rounding (repeated bf16 values, a border peak), float32 rounding and the
first-maximum rule decide the box centre; a float64 upsampling decides otherwise (docs/protocol/metrics.md,
"Deviations and decisions"). Calling ``F.interpolate`` itself would not reproduce one answer:
torch picks a vectorised or a generic CPU kernel by thread count, channel count and memory
format, and the two round differently. This module evaluates the generic kernel's arithmetic
(ATen ``UpSampleKernel.cpp``: ``HelperInterpLinear`` weights, ``Interpolate`` 2-tap sums; as
compiled with FMA for AVX2/AVX512, which contracts ``a * b + c`` to one fused multiply-add) with
correctly rounded float32 operations, so the peaks are the same on any device, batch and thread
count, and the values equal ``F.interpolate``'s generic kernel to the last bit
(tests/metrics/test_float32_peaks.py). Only the few pixels that can hold the maximum are evaluated so.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch
from torch import Tensor

from ._checks import check_positive_int
from .maps import check_map_pool
from .parts import FRAME_SIZE


def fma32(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """Correctly rounded float32 ``a * b + c`` (one rounding, as an FMA instruction).

    The product of two float32 values is exact in float64; the float64 sum is then rounded to odd
    (TwoSum error; Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved
    algorithms using rounding to odd", IEEE TC 2008), and round-to-odd at 53 >= 24 + 2 bits
    followed by rounding to float32 equals a single rounding of the exact value.
    """
    p = a.to(torch.float64) * b.to(torch.float64)  # exact: 24 + 24 significant bits
    c64 = c.to(torch.float64)
    s = p + c64
    b_virtual = s - p  # TwoSum (Knuth): the exact error of s = fl(p + c)
    err = (p - (s - b_virtual)) + (c64 - b_virtual)
    even = (s.view(torch.int64) & 1) == 0
    away = torch.nextafter(s, torch.where(err > 0, math.inf, -math.inf).to(torch.float64))  # towards the exact value
    odd = torch.where((err != 0) & even, away, s)  # round to odd
    return odd.to(torch.float32)


@lru_cache(maxsize=64)
def _linear_taps_cpu(n_in: int, n_out: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    check_positive_int("n_in", n_in)
    check_positive_int("n_out", n_out)
    scale = torch.full((n_out,), float(n_in), dtype=torch.float32) / float(n_out)
    half = torch.full((n_out,), 0.5, dtype=torch.float32)
    dst = torch.arange(n_out, dtype=torch.float32) + 0.5  # exact below 2^23
    src = fma32(scale, dst, -half).clamp(min=0.0)
    i0 = torch.floor(src).to(torch.int64).clamp(max=n_in - 1)
    w1 = (src - i0.to(torch.float32)).clamp(0.0, 1.0)
    i1 = i0 + (i0 < n_in - 1).to(torch.int64)
    return i0, i1, 1.0 - w1, w1


def linear_taps(n_in: int, n_out: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Indices and float32 weights ``(i0, i1, w0, w1)`` of 1-D bilinear resampling ``n_in -> n_out``.

    ATen ``HelperInterpLinear::compute_indices_weights`` with ``align_corners=False`` and no scale
    factor: ``scale = float(n_in) / n_out``; ``src = scale * (i + 0.5) - 0.5`` (fused), clamped at
    0 (``area_pixel_compute_source_index``); ``i0 = min(floor(src), n_in - 1)``,
    ``w1 = clamp(src - i0, 0, 1)``, ``w0 = 1 - w1``, ``i1 = i0 + (i0 < n_in - 1)``
    (``guard_index_and_lambda``, ``compute_source_index_and_lambda``).
    """
    return tuple(t.to(device) for t in _linear_taps_cpu(int(n_in), int(n_out)))  # type: ignore[return-value]


def avg_pool_float32(maps: Tensor, k: int) -> Tensor:
    """``F.avg_pool2d(kernel_size=k, stride=k)`` on float32 ``(..., h, w)`` maps, summed in
    ATen ``cpu_avg_pool2d``'s order (rows, then columns within a row, one float32 rounding per
    addition), then divided by ``k * k``; odd sizes drop the last row/column, as there."""
    check_map_pool(maps, k)
    h, w = maps.shape[-2] // k, maps.shape[-1] // k
    cells = maps[..., : h * k, : w * k].unflatten(-1, (w, k)).unflatten(-3, (h, k))  # (..., h, k, w, k)
    total = cells[..., 0, :, 0]
    for di in range(k):
        for dj in range(k):
            if di or dj:
                total = total + cells[..., di, :, dj]
    return total / float(k * k)


def tap_matrix(n_in: int, n_out: int, device: torch.device | str = "cpu") -> Tensor:
    """(n_out, n_in) float64 matrix of :func:`linear_taps`' float32 weights (``W[i, i0] += w0``,
    ``W[i, i1] += w1``): ``W_rows @ map @ W_cols.T`` is the kernel's result up to its roundings."""
    i0, i1, w0, w1 = linear_taps(n_in, n_out, device)
    rows = torch.arange(n_out, device=device)
    weights = torch.zeros((n_out, n_in), dtype=torch.float64, device=device)
    weights.index_put_((rows, i0), w0.to(torch.float64), accumulate=True)
    weights.index_put_((rows, i1), w1.to(torch.float64), accumulate=True)
    return weights


def bilinear_float32_at(maps: Tensor, which: Tensor, rows: Tensor, cols: Tensor, size: int = FRAME_SIZE) -> Tensor:
    """Pixels ``(rows, cols)`` of ``F.interpolate(maps[which], (size, size), mode="bilinear",
    align_corners=False)`` for float32 ``(M, h, w)`` maps, as ATen's generic CPU kernel computes
    them (``Interpolate``: rows outer, columns inner, each 2-tap sum ``fma(t0, w0, t1 * w1)``)."""
    r0, r1, rw0, rw1 = (t[rows] for t in linear_taps(maps.shape[-2], size, maps.device))
    c0, c1, cw0, cw1 = (t[cols] for t in linear_taps(maps.shape[-1], size, maps.device))

    def across(r: Tensor) -> Tensor:  # one source row interpolated between its two columns
        return fma32(maps[which, r, c0], cw0, maps[which, r, c1] * cw1)

    return fma32(across(r0), rw0, across(r1) * rw1)


# |float32 kernel value - W_rows @ map @ W_cols.T| <= 4.1 u max|map| (u = 2^-24: two roundings per
# 2-tap sum, weights summing to 1 + u); pixels below the float64 maximum by more than twice that
# cannot hold the float32 maximum. 16 u leaves a margin of 1.9x (and covers float64's rounding).
CANDIDATE_TOLERANCE = 16 * 2.0**-24


def nppp_peaks(maps: Tensor, map_pool: int = 1, size: int = FRAME_SIZE) -> Tensor:
    """``(N, J, h, w)`` maps -> ``(N, J, 2)`` ``(row, col)`` box centres as NPPP's
    ``eval/distinctiveness.py`` finds them: the maps in float32 (the network's dtype there),
    2x2 average pooling for ``map_pool = 2``, bilinear upsampling, then
    ``adaptive_max_pool2d``'s index: the first row-major strict maximum of the float32 values.

    Only the pixels that can hold that maximum are computed in float32 (those within
    :data:`CANDIDATE_TOLERANCE` ``* max|map|`` of the float64 maximum); the answer equals the
    first maximum of the whole float32 map (tests/metrics/test_float32_peaks.py).
    """
    check_map_pool(maps, map_pool)
    x = maps.to(torch.float32)
    if map_pool > 1:
        x = avg_pool_float32(x, map_pool)
    x = x.flatten(0, -3)  # (M, h, w)
    approx = tap_matrix(x.shape[-2], size, x.device) @ x.to(torch.float64) @ tap_matrix(x.shape[-1], size, x.device).T
    approx = approx.flatten(-2)
    scale = x.abs().flatten(-2).amax(dim=-1).to(torch.float64)
    near = approx >= (approx.amax(dim=-1) - CANDIDATE_TOLERANCE * scale).unsqueeze(-1)
    which, flat = near.nonzero(as_tuple=True)  # row-major within each map
    rows, cols = torch.div(flat, size, rounding_mode="floor"), flat % size
    values = bilinear_float32_at(x, which, rows, cols, size)
    top = torch.full((x.shape[0],), -math.inf, dtype=torch.float32, device=x.device)
    top = top.scatter_reduce(0, which, values, "amax")
    is_top = values == top[which]
    first = torch.full((x.shape[0],), size * size, dtype=torch.int64, device=x.device)
    first = first.scatter_reduce(0, which[is_top], flat[is_top], "amin")  # the first strict maximum
    index = first.view(maps.shape[:-2])
    return torch.stack([torch.div(index, size, rounding_mode="floor"), index % size], dim=-1)
