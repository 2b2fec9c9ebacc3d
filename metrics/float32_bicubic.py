"""EvalProtoPNet's bicubic upsampling as its official code computes it on float32 maps: OpenCV's
own ``cv2.resize(..., interpolation=cv2.INTER_CUBIC)`` kernel, every operation rounded to float32.

Used for the peaks of flat (constant) maps, where float32 rounding alone decides the first
maximum (``metrics.maps.upsampled_peaks``): exact arithmetic keeps the map constant, OpenCV's
float32 sums move some pixels by an ulp, and ``np.where(m == m.max())`` takes the first of those.
The arithmetic follows OpenCV's ``imgproc/src/resize.cpp`` (``resize`` computes
``fx = (float)((dx + 0.5)·scale − 0.5)`` with ``scale = 1 / (dsize / ssize)`` in double,
``interpolateCubic`` the four weights in float (Keys, A = −0.75, the last one as
``1 − c0 − c1 − c2``), ``HResizeCubic`` the horizontal sums left to right, ``VResizeCubicVec_32f``
the vertical ones as ``S0·b0 + (S1·b1 + (S2·b2 + S3·b3))`` with separate multiplies and adds (the
SSE baseline build), source indices clamped at the borders). It equals ``cv2.resize`` bit for bit
with OpenCV's own kernel (``cv2.ipp.setUseIPP(False)``; tests/metrics/test_flat_map_peaks.py); the IPP
HAL that recent wheels enable by default rounds differently (docs/protocol/metrics.md, "Deviations and decisions").
"""
from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from ._checks import check_positive_int
from .parts import FRAME_SIZE

_A = -0.75  # interpolateCubic's A (exact in float32, as are 5A, 8A, 4A, A + 2, A + 3)


@lru_cache(maxsize=64)
def cubic_taps(n_in: int, n_out: int) -> tuple[Tensor, Tensor]:
    """(n_out, 4) source indices (clamped) and float32 weights of OpenCV's INTER_CUBIC resize."""
    check_positive_int("n_in", n_in)
    check_positive_int("n_out", n_out)
    scale = 1.0 / (n_out / n_in)  # resize(): inv_scale_x = (double)dsize/ssize, scale_x = 1./inv_scale_x
    fx = ((torch.arange(n_out, dtype=torch.float64) + 0.5) * scale - 0.5).to(torch.float32)
    sx = torch.floor(fx)
    x = fx - sx  # float32
    x1, mx = x + 1.0, 1.0 - x
    c0 = ((_A * x1 - 5 * _A) * x1 + 8 * _A) * x1 - 4 * _A
    c1 = (((_A + 2) * x - (_A + 3)) * x) * x + 1.0
    c2 = (((_A + 2) * mx - (_A + 3)) * mx) * mx + 1.0
    c3 = ((1.0 - c0) - c1) - c2
    index = (sx.to(torch.int64).unsqueeze(-1) + torch.arange(-1, 3)).clamp(0, n_in - 1)
    return index, torch.stack([c0, c1, c2, c3], dim=-1)


def cv2_cubic_float32(maps: Tensor, size: int = FRAME_SIZE) -> Tensor:
    """``(..., h, w)`` maps (cast to float32) → ``(..., size, size)`` float32, as OpenCV computes."""
    x = maps.to(torch.float32)
    cols, alpha = (t.to(x.device) for t in cubic_taps(x.shape[-1], size))
    rows, beta = (t.to(x.device) for t in cubic_taps(x.shape[-2], size))
    horizontal = torch.zeros((*x.shape[:-1], size), dtype=torch.float32, device=x.device)
    for k in range(4):  # HResizeCubic: v += S[sx + k - 1] * alpha[k], left to right
        horizontal = horizontal + x[..., cols[:, k]] * alpha[:, k]
    taps = [horizontal[..., rows[:, k], :] * beta[:, k, None] for k in range(4)]
    return taps[0] + (taps[1] + (taps[2] + taps[3]))  # VResizeCubicVec_32f: muladd(S0, b0, muladd(S1, …))


def first_max_positions(maps: Tensor) -> Tensor:
    """First row-major position of the exact maximum of each ``(..., H, W)`` map → ``(..., 2)``
    (EvalProtoPNet: ``np.where(m == m.max())``, then the first hit)."""
    h, w = maps.shape[-2:]
    flat = maps.reshape(*maps.shape[:-2], h * w)
    index = (flat == flat.amax(dim=-1, keepdim=True)).to(torch.uint8).argmax(dim=-1)
    return torch.stack([torch.div(index, w, rounding_mode="floor"), index % w], dim=-1)
