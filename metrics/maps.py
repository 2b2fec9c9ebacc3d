"""Activation maps: pooling, upsampling to the 224 frame, first row-major argmax.

docs/protocol/metrics.md "Shared core" steps 1-2 (bicubic, EvalProtoPNet ``cv2.resize(..., INTER_CUBIC)`` +
``np.where(m == m.max())``), "Distinctiveness" (bilinear, NPPP ``F.interpolate(mode="bilinear")``)
and "Grid resolution" (``map_pool = 2``: NPPP ``F.avg_pool2d(kernel_size=2, stride=2)``).

Numerics (choices docs/protocol/metrics.md leaves open):
- Upsampling is separable and linear, so it is computed as ``W_rows @ map @ W_cols.T`` with the
  interpolation weight matrices of ``F.interpolate(..., align_corners=False)`` (same kernel,
  same taps, same border rule), in float64. This equals ``F.interpolate`` to ~1e-14 and is about
  3x faster on CPU (a batched GEMM instead of a per-pixel gather); the tests check it against
  ``F.interpolate`` and against an independent numpy ``cv2.INTER_CUBIC`` re-implementation.
- The argmax is the first row-major pixel whose value is within ``TIE_RTOL * max|native map|``
  of the maximum. The known answers of docs/protocol/metrics.md are exact-arithmetic ties (e.g. a one-hot cell
  whose peak falls between pixels 41 and 42); a strict ``==`` argmax would let the last bit of
  rounding decide them (torch float64 bilinear puts the 8x8 cell (1, 2) at (42, 70), exact
  arithmetic and cv2 at (41, 69)). Flat (constant) maps, where every pixel ties, take the peak
  the official float32 ``cv2.resize`` path takes (``metrics.float32_bicubic``).
"""
from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_maps, check_positive_int
from .parts import FRAME_SIZE

TIE_RTOL = 1e-12  # values within 1e-12 * max|map| of the maximum count as tied (first one wins)
CHUNK_CPU = 4  # images upsampled at once on CPU: cache-friendly (4 x 7 x 400 KB), measured fastest
CHUNK_CUDA = 64  # on GPU: 64 x 7 x 224 x 224 float64 = 180 MB per upsampled batch

_MODES = ("bicubic", "bilinear")
_CUBIC_A = -0.75  # Keys' a of cv2.INTER_CUBIC and torch's bicubic


def iter_chunks(n: int, chunk_size: int | None, device: torch.device | None = None) -> Iterator[slice]:
    """Slices ``[s, s + chunk_size)`` covering ``range(n)``; bounds the upsampling memory.

    ``chunk_size=None``: 64 images on CUDA, 4 on CPU (measured fastest there: cache-resident).
    """
    if chunk_size is None:
        chunk_size = CHUNK_CUDA if device is not None and device.type == "cuda" else CHUNK_CPU
    check_positive_int("chunk_size", chunk_size)
    for start in range(0, n, chunk_size):
        yield slice(start, min(n, start + chunk_size))


def check_map_pool(maps: Tensor, map_pool: int) -> None:
    """``map_pool`` is a positive int no larger than the ``(..., h, w)`` maps' sides."""
    check_positive_int("map_pool", map_pool)
    if maps.shape[-2] < map_pool or maps.shape[-1] < map_pool:
        raise ValueError(f"map_pool: {map_pool} exceeds the map size {tuple(maps.shape[-2:])}")


def pool_maps(maps: Tensor, map_pool: int = 1) -> Tensor:
    """docs/protocol/metrics.md "Grid resolution": ``map_pool = 1`` native grid, ``k > 1``: ``k x k`` average
    pooling with stride k (NPPP ``pnp.py::push_forward`` / ``get_attn_maps``:
    ``F.avg_pool2d(kernel_size=(2, 2), stride=2)``; odd sizes drop the last row/column, as there).
    """
    check_positive_int("map_pool", map_pool)
    if map_pool == 1:
        return maps
    check_map_pool(maps, map_pool)
    return F.avg_pool2d(maps, kernel_size=map_pool, stride=map_pool)


def _keys_kernel(d: Tensor, a: float = _CUBIC_A) -> Tensor:
    """Keys' cubic convolution kernel at distances ``d >= 0`` (torch ``cubic_convolution1/2``)."""
    near = ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0  # |d| <= 1
    far = ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a  # 1 < |d| < 2
    return torch.where(d <= 1.0, near, torch.where(d < 2.0, far, torch.zeros_like(d)))


@lru_cache(maxsize=64)
def _interpolation_matrix_cpu(n_in: int, n_out: int, mode: str) -> Tensor:
    out = torch.arange(n_out, dtype=torch.float64)
    src = (out + 0.5) * (n_in / n_out) - 0.5  # half-pixel centres (align_corners=False)
    rows = torch.arange(n_out)
    weights = torch.zeros((n_out, n_in), dtype=torch.float64)
    if mode == "bicubic":
        x0 = torch.floor(src)
        t = src - x0
        for k in (-1, 0, 1, 2):  # 4 taps floor(src)-1 .. floor(src)+2, clamped = border replicate
            idx = (x0.to(torch.int64) + k).clamp(0, n_in - 1)
            weights.index_put_((rows, idx), _keys_kernel((k - t).abs()), accumulate=True)
    else:
        src = src.clamp(min=0.0)  # bilinear: negative source coordinates clamp to 0
        x0 = torch.floor(src)
        t = src - x0
        i0 = x0.to(torch.int64).clamp(max=n_in - 1)
        weights.index_put_((rows, i0), 1.0 - t, accumulate=True)
        weights.index_put_((rows, (i0 + 1).clamp(max=n_in - 1)), t, accumulate=True)
    return weights


def interpolation_matrix(n_in: int, n_out: int, mode: str, device: torch.device | str = "cpu") -> Tensor:
    """(n_out, n_in) float64 weights of 1-D ``mode`` interpolation, ``align_corners=False``.

    bicubic: Keys kernel a = -0.75, half-pixel centres, border replicate (``cv2.INTER_CUBIC``,
    torch ``upsample_bicubic2d``); bilinear: torch ``upsample_bilinear2d`` (source clamped at 0,
    upper neighbour clamped at the border).
    """
    if mode not in _MODES:
        raise ValueError(f"mode: expected one of {_MODES}, got {mode!r}")
    return _interpolation_matrix_cpu(int(n_in), int(n_out), mode).to(device)


def upsample_maps(maps: Tensor, size: int = FRAME_SIZE, mode: str = "bicubic") -> Tensor:
    """Upsample ``(..., h, w)`` maps to ``size x size`` in float64, ``align_corners=False``.

    bicubic: EvalProtoPNet's ``cv2.resize(..., INTER_CUBIC)`` (docs/protocol/metrics.md step 1);
    bilinear: NPPP ``eval/distinctiveness.py`` / ``eval/comprehensiveness.py``
    (``F.interpolate(mode="bilinear")``). Computed as ``W_h @ map @ W_w.T`` (module docstring).
    """
    x = maps.to(torch.float64)
    w_rows = interpolation_matrix(x.shape[-2], size, mode, x.device)
    w_cols = interpolation_matrix(x.shape[-1], size, mode, x.device)
    return torch.matmul(torch.matmul(w_rows, x), w_cols.T)


def argmax_positions(maps: Tensor, tie_rtol: float = TIE_RTOL, scale: Tensor | None = None) -> Tensor:
    """First row-major argmax of each ``(..., H, W)`` map -> ``(..., 2)`` int64 ``(row, col)``.

    EvalProtoPNet: ``np.where(m == m.max())`` then the first hit (docs/protocol/metrics.md step 2), with
    ties taken up to ``tie_rtol * scale`` (see the module docstring). ``scale`` (shape ``...``)
    defaults to ``max|map|``; :func:`peak_positions` passes ``max|native map|`` (cheaper, same order).
    """
    h, w = maps.shape[-2:]
    flat = maps.reshape(*maps.shape[:-2], h * w)
    hi = flat.amax(dim=-1)
    if scale is None:
        scale = torch.maximum(flat.amin(dim=-1).abs(), hi.abs())
    tol = tie_rtol * scale.to(flat.dtype)
    is_max = flat >= (hi - tol).unsqueeze(-1)
    index = is_max.to(torch.uint8).argmax(dim=-1)  # torch.argmax returns the first maximal index
    return torch.stack([torch.div(index, w, rounding_mode="floor"), index % w], dim=-1)


def map_scale(maps: Tensor) -> Tensor:
    """``max|map|`` of each ``(..., h, w)`` map: the scale of the argmax tie tolerance."""
    return maps.abs().flatten(-2).amax(dim=-1)


def upsampled_peaks(maps: Tensor, mode: str, size: int = FRAME_SIZE) -> Tensor:
    """First argmax of each (already pooled) ``(..., h, w)`` map after upsampling to the frame
    (docs/protocol/metrics.md "Shared core" 1-2), ties relative to ``max|map|`` of the map as given.

    bicubic, flat (constant) maps: every pixel ties in exact arithmetic, and the official code's
    float32 ``cv2.resize`` lets rounding pick the peak; those maps take it as that kernel does
    (``metrics.float32_bicubic``, first exact maximum)."""
    peaks = argmax_positions(upsample_maps(maps, size=size, mode=mode), scale=map_scale(maps))
    if mode == "bicubic":
        flat_values = maps.flatten(-2)
        flat = flat_values.amax(dim=-1) == flat_values.amin(dim=-1)
        if bool(flat.any()):
            from .float32_bicubic import cv2_cubic_float32, first_max_positions

            peaks[flat] = first_max_positions(cv2_cubic_float32(maps[flat], size))
    return peaks


def select_topk_maps(maps: Tensor, topk: int | None) -> Tensor:
    """Keep, per image, the ``min(topk, J)`` maps with the largest maximum (``None``: all J).

    NPPP ``eval/distinctiveness.py`` / ``eval/comprehensiveness.py`` (``push_forward`` branch):
    ``adaptive_max_pool2d`` then ``topk`` over the class's prototypes, before pooling.
    docs/protocol/metrics.md uses all J maps; this option only reproduces NPPP's baseline evaluation.
    """
    if topk is None:
        return maps
    check_positive_int("topk", topk)
    k = min(topk, maps.shape[1])
    if k == maps.shape[1]:
        return maps
    peak = maps.flatten(2).amax(dim=-1)  # (N, J)
    idx = peak.topk(k, dim=1).indices  # (N, k)
    return torch.gather(maps, 1, idx[:, :, None, None].expand(-1, -1, *maps.shape[2:]))


def peak_positions(
    maps: Tensor,
    mode: str = "bicubic",
    *,
    map_pool: int = 1,
    size: int = FRAME_SIZE,
    chunk_size: int | None = None,
) -> Tensor:
    """``(N, J, h, w)`` maps -> ``(N, J, 2)`` argmax ``(row, col)`` in the ``size`` frame.

    pool (``map_pool``) -> upsample (``mode``) -> first argmax, all maps of ``chunk_size``
    images at once; the upsampled maps are never held for more than one chunk.
    """
    check_maps("maps", maps)
    n, j = maps.shape[:2]
    out = torch.empty((n, j, 2), dtype=torch.int64, device=maps.device)
    for sl in iter_chunks(n, chunk_size, maps.device):
        out[sl] = upsampled_peaks(pool_maps(maps[sl].to(torch.float64), map_pool), mode, size)
    return out
