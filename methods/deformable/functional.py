"""Pure tensor functions of Deformable ProtoPNet (Donnelly et al., CVPR 2022; official code
``jdonnelly36/Deformable-ProtoPNet``): where the four parts of a 2×2 dilated prototype are read,
norm-preserving bilinear sampling, the part-cosine activation, the subtractive margin and the
within-class orthogonality penalty. Shapes: B images, D channels, H×W token grid, M = C·J
prototypes, K = 4 parts.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.common.precision import float32_island

KERNEL = 2  # prototypes are D×2×2 (docs/protocol/deformable_protopnet.md)
DILATION = 2  # official run: prototype_dilation=2
PADDING = 1  # official model.py: prototype_padding = (1, 1)
NUM_PARTS = KERNEL * KERNEL
ACTIVATION_DIVISOR = 1.01  # official cos_activation: activations_dot / (input_vector_length * 1.01)
_SQRT_FLOOR = 1e-12  # below this a squared sample is treated as 0 (keeps sqrt's gradient finite)


def tap_positions(offsets: Tensor) -> Tensor:
    """B×K×H×W×2 (row, col) grid positions of the K parts read for every output cell.

    Output cell (y, x) reads part k = 2i + j at ``(y − 1 + 2i + Δrow_k, x − 1 + 2j + Δcol_k)``
    with ``Δrow_k = offsets[:, 2k]`` and ``Δcol_k = offsets[:, 2k + 1]`` (B×2K×H×W): stride 1,
    padding 1, dilation 2, offsets in the row-major tap order of the official
    ``deform_im2col_cuda.cuh`` (``h_im = h_in + i·dilation_h + offset_h``), so the output grid
    equals the input grid and the undeformed taps sit symmetrically around the cell.
    """
    batch, _, height, width = offsets.shape
    taps = torch.arange(KERNEL, device=offsets.device)
    tap_row = (DILATION * taps).repeat_interleave(KERNEL).view(1, NUM_PARTS, 1, 1)  # i of k = 2i + j
    tap_col = (DILATION * taps).repeat(KERNEL).view(1, NUM_PARTS, 1, 1)  # j of k = 2i + j
    rows = torch.arange(height, device=offsets.device).view(1, 1, height, 1) - PADDING + tap_row
    cols = torch.arange(width, device=offsets.device).view(1, 1, 1, width) - PADDING + tap_col
    delta = offsets.view(batch, NUM_PARTS, 2, height, width)
    return torch.stack((rows + delta[:, :, 0], cols + delta[:, :, 1]), dim=-1)


def norm_preserving_sample(features: Tensor, positions: Tensor) -> Tensor:
    """B×D×K×H'×W' samples of non-negative ``features`` (B×D×H×W) at fractional ``positions``
    (B×K×H'×W'×2, (row, col) in grid units).

    Per channel ``s = sqrt(Σ_corners w · x²)`` with the bilinear corner weights w (Donnelly et
    al. 2022's norm-preserving interpolation; the official ``norm_preserve_deform_conv_cuda.cu``
    squares the input, interpolates, takes the root), so
    ``‖s‖² = Σ w ‖x_corner‖²``: samples of features of one common length keep that length.
    Corners outside the grid contribute 0 (official ``zero_padding=True``).

    The four corners are read by ``grid_sample(mode="nearest")`` at integer positions and
    weighted here: bilinear ``grid_sample`` rounds the grid coordinates in float32, and the root
    turns a ~1e-7 weight on a neighbour of a zero (padding) corner into a ~3e-4 leak. The
    gradient reaches the positions through the weights (the official backward's coordinate
    weights) and the features through the nearest reads.
    """
    batch, channels, height, width = features.shape
    _, parts, out_h, out_w, _ = positions.shape
    low = positions.detach().floor()
    frac = (positions - low).unsqueeze(1)  # B×1×K×H'×W'×2
    corner = torch.arange(4, device=positions.device)  # built on the device: no host-to-device copy per step
    step = torch.stack([corner // 2, corner % 2], dim=-1).view(1, 4, 1, 1, 1, 2)  # (0,0), (0,1), (1,0), (1,1)
    # B×4×K×H'×W': the row weight times the column weight (a product, not .prod(dim=-1): prod's
    # CUDA backward counts the zeros on the host, a sync in every step; the same two-factor product)
    pair = torch.where(step == 1, frac, 1 - frac)
    weights = pair[..., 0] * pair[..., 1]
    corners = low.unsqueeze(1) + step  # B×4×K×H'×W'×2, integer (row, col)
    # grid_sample's align_corners=False maps grid unit p to (2p + 1) / size − 1, x first
    grid = torch.stack([(2 * corners[..., 1] + 1) / width, (2 * corners[..., 0] + 1) / height], dim=-1) - 1
    squared = F.grid_sample(features.square(), grid.view(batch, 4 * parts * out_h, out_w, 2),
                            mode="nearest", padding_mode="zeros", align_corners=False)
    squared = (squared.view(batch, channels, 4, parts, out_h, out_w) * weights.unsqueeze(1)).sum(dim=2)
    positive = squared > _SQRT_FLOOR
    return torch.where(positive, torch.where(positive, squared, 1.0).sqrt(), 0.0)


def unit_parts(prototypes: Tensor) -> Tensor:
    """…×D×K prototypes (…×D×2×2 in) with every part unit-normalised over D (official
    cos_activation: ``normalized_prototypes = appended_protos / prototype_vector_length``)."""
    return F.normalize(prototypes.flatten(-2), dim=-2)


def part_cosine(samples: Tensor, prototypes: Tensor) -> Tensor:
    """B×M×H×W activation ``(1/K) Σ_k ⟨s_k, p̂_k⟩ / 1.01`` (not ReLU'd), the mean part cosine
    when ``samples`` (B×D×K×H×W) come from unit-length features.

    ``prototypes``: M×D×2×2 shared by every image, or B×M×D×2×2 chosen per image. Official
    cos_activation: features scaled to 64/√K, parts to 1/√K, dot product / (64 · 1.01).
    """
    batch, _, _, height, width = samples.shape
    parts = unit_parts(prototypes).flatten(-2)  # (B×)M×(D·K), the (d, k) order of the samples
    scores = parts @ samples.reshape(batch, -1, height * width)  # B×M×(H·W), no transpose of the samples
    return scores.view(batch, -1, height, width) / (NUM_PARTS * ACTIVATION_DIVISOR)


def subtractive_margin(activations: Tensor, wrong: Tensor, margin: float) -> Tensor:
    """``cos(relu(arccos(a) − m))`` where ``wrong`` (B×M bool) marks a wrong-class prototype,
    ``a`` unchanged elsewhere; ``activations`` B×M×… with |a| < 1. Official cos_activation
    ("subtractive margin", after ArcFace, arXiv:1801.07698)."""
    penalised = torch.cos(torch.relu(torch.arccos(activations) - margin))
    mask = wrong.reshape(wrong.shape + (1,) * (activations.dim() - wrong.dim()))
    return torch.where(mask, penalised, activations)


@float32_island  # ‖G − I‖ with G's diagonal ≈ 1: bf16's spacing at 1 (2⁻⁸) would swamp the off-diagonal terms
def within_class_orthogonality(prototypes: Tensor, per_class: int) -> Tensor:
    """``sqrt(Σ_c ‖P̂_c P̂_cᵀ − I‖_F²)``, P̂_c the (J·K)×D unit parts of class c's J prototypes
    (M×D×2×2 in, class-major). Official ``get_prototype_orthogonalities`` + ``torch.norm``, with
    the groups taken per class (docs/protocol/deformable_protopnet.md Decision; the official view groups consecutive blocks)."""
    parts = unit_parts(prototypes).transpose(-1, -2)  # M×K×D
    num_prototypes, _, dim = parts.shape
    per_class_parts = parts.reshape(num_prototypes // per_class, per_class * NUM_PARTS, dim)
    gram = per_class_parts @ per_class_parts.transpose(1, 2)
    eye = torch.eye(per_class * NUM_PARTS, device=gram.device, dtype=gram.dtype)
    return torch.linalg.vector_norm(gram - eye)
