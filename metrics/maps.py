"""Activation maps: pooling, upsampling to the 224 frame, first row-major argmax.

metrics.md "Shared core" steps 1-2 (bicubic, EvalProtoPNet ``cv2.resize(..., INTER_CUBIC)`` +
``np.where(m == m.max())``), "Distinctiveness" (bilinear, NPPP ``F.interpolate(mode="bilinear")``)
and "Grid resolution" (``map_pool = 2``: NPPP ``F.avg_pool2d(kernel_size=2, stride=2)``).

Numerics (a choice metrics.md leaves open): maps are upsampled in float64, and the argmax is
the first row-major pixel whose value is within ``TIE_RTOL * max|map|`` of the maximum. The
known answers of metrics.md are exact-arithmetic ties (e.g. a one-hot cell whose peak falls
between pixels 41 and 42); a strict ``==`` argmax would let the last bit of rounding decide
them (torch float64 bilinear puts the 8x8 cell (1, 2) at (42, 70), exact arithmetic at (41, 69)).
"""
from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_maps, check_positive_int
from .parts import FRAME_SIZE

TIE_RTOL = 0.0  # values within 1e-12 * max|map| of the maximum count as tied (first one wins)
DEFAULT_CHUNK = 64  # images upsampled at once: 64 x 7 x 224 x 224 float64 = 180 MB

_MODES = ("bicubic", "bilinear")


def iter_chunks(n: int, chunk_size: int) -> Iterator[slice]:
    """Slices ``[s, s + chunk_size)`` covering ``range(n)``; bounds the upsampling memory."""
    check_positive_int("chunk_size", chunk_size)
    for start in range(0, n, chunk_size):
        yield slice(start, min(n, start + chunk_size))


def pool_maps(maps: Tensor, map_pool: int = 1) -> Tensor:
    """metrics.md "Grid resolution": ``map_pool = 1`` native grid, ``k > 1``: ``k x k`` average
    pooling with stride k (NPPP ``pnp.py::push_forward`` / ``get_attn_maps``:
    ``F.avg_pool2d(kernel_size=(2, 2), stride=2)``; odd sizes drop the last row/column, as there).
    """
    check_positive_int("map_pool", map_pool)
    if map_pool == 1:
        return maps
    if maps.shape[-2] < map_pool or maps.shape[-1] < map_pool:
        raise ValueError(f"map_pool: {map_pool} exceeds the map size {tuple(maps.shape[-2:])}")
    return F.avg_pool2d(maps, kernel_size=map_pool, stride=map_pool)


def upsample_maps(maps: Tensor, size: int = FRAME_SIZE, mode: str = "bicubic") -> Tensor:
    """Upsample ``(..., h, w)`` maps to ``size x size`` in float64, ``align_corners=False``.

    bicubic: Keys kernel a = -0.75, half-pixel centres, border replicate, i.e.
    ``cv2.INTER_CUBIC`` of EvalProtoPNet (metrics.md step 1; checked against an independent
    numpy implementation in ``tests/test_metrics_oracle.py``).
    bilinear: NPPP ``eval/distinctiveness.py`` / ``eval/comprehensiveness.py``.
    """
    if mode not in _MODES:
        raise ValueError(f"mode: expected one of {_MODES}, got {mode!r}")
    lead = maps.shape[:-2]
    x = maps.to(torch.float64).reshape(-1, 1, *maps.shape[-2:])
    up = F.interpolate(x, size=(size, size), mode=mode, align_corners=False)
    return up.reshape(*lead, size, size)


def argmax_positions(maps: Tensor, tie_rtol: float = TIE_RTOL) -> Tensor:
    """First row-major argmax of each ``(..., H, W)`` map -> ``(..., 2)`` int64 ``(row, col)``.

    EvalProtoPNet: ``np.where(m == m.max())`` then the first hit (metrics.md step 2), with
    ties taken up to ``tie_rtol * max|map|`` (see the module docstring).
    """
    h, w = maps.shape[-2:]
    flat = maps.reshape(*maps.shape[:-2], h * w)
    lo, hi = torch.aminmax(flat, dim=-1)
    tol = tie_rtol * torch.maximum(lo.abs(), hi.abs())
    is_max = flat >= (hi - tol).unsqueeze(-1)
    index = is_max.to(torch.uint8).argmax(dim=-1)  # torch.argmax returns the first maximal index
    return torch.stack([torch.div(index, w, rounding_mode="floor"), index % w], dim=-1)


def select_topk_maps(maps: Tensor, topk: int | None) -> Tensor:
    """Keep, per image, the ``min(topk, J)`` maps with the largest maximum (``None``: all J).

    NPPP ``eval/distinctiveness.py`` / ``eval/comprehensiveness.py`` (``push_forward`` branch):
    ``adaptive_max_pool2d`` then ``topk`` over the class's prototypes, before pooling.
    metrics.md uses all J maps; this option only reproduces NPPP's baseline evaluation.
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
    chunk_size: int = DEFAULT_CHUNK,
) -> Tensor:
    """``(N, J, h, w)`` maps -> ``(N, J, 2)`` argmax ``(row, col)`` in the ``size`` frame.

    pool (``map_pool``) -> upsample (``mode``) -> first argmax, all maps of ``chunk_size``
    images at once; the upsampled maps are never held for more than one chunk.
    """
    check_maps("maps", maps)
    n, j = maps.shape[:2]
    out = torch.empty((n, j, 2), dtype=torch.int64, device=maps.device)
    for sl in iter_chunks(n, chunk_size):
        pooled = pool_maps(maps[sl].to(torch.float64), map_pool)
        out[sl] = argmax_positions(upsample_maps(pooled, size=size, mode=mode))
    return out
