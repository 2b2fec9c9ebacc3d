"""Comprehensiveness (%): docs/protocol/metrics.md "Extras the suite may add" (NPPP).

Official code: NPPP ``eval/comprehensiveness.py``: the J maps of the ground-truth class,
upsampled **bilinearly** to 224 (``F.interpolate(mode="bilinear")``, align_corners=False),
each min-max normalised and thresholded (``>= 0.6``), the union over the J maps, and its
IoU with the bird's segmentation mask (cropped to the box, resized nearest-exact, ``> 200``);
the score is the mean IoU over the test images, here times 100.

Choices (docs/protocol/metrics.md is silent):
- a constant map (max == min) selects no pixel: NPPP divides 0/0, and NaN >= 0.6 is False;
- the test is written ``a >= min + 0.6 * (max - min)`` (no division): identical except for
  pixels within one rounding error of the threshold;
- maps are upsampled in float64 (NPPP: float32);
- IoU = inter / union exactly, 0 when both masks are empty (NPPP adds eps = 1e-6 to the
  union, which moves no score by more than 1e-4 percent points);
- returns ``None`` for zero images.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_maps
from .maps import iter_chunks, pool_maps, select_topk_maps, upsample_maps
from .parts import FRAME_SIZE

MAP_THRESHOLD = 0.6  # NPPP evaluate_comprehensiveness(threshold=0.6)
MASK_THRESHOLD = 200  # NPPP CUBEvalDataset: (seg_map_cropped > 200)


def segmentation_to_frame(
    segmentation: np.ndarray | Tensor,
    box: tuple[int, int, int, int] | Tensor | np.ndarray,
    size: int = FRAME_SIZE,
    threshold: int = MASK_THRESHOLD,
) -> Tensor:
    """One CUB segmentation image -> (size, size) bool foreground mask in the 224 frame.

    segmentation: torch ``(H, W)`` or ``(C, H, W)``; numpy ``(H, W)`` or ``(H, W, C)`` (PIL
    layout). box: integer ``(x1, y1, x2, y2)`` of the annotation.
    NPPP ``CUBEvalDataset``: ``resized_crop(top=y, left=x, height=h, width=w, size=224,
    NEAREST_EXACT)`` (zero padding outside the image), first channel, ``> 200``.
    """
    if isinstance(segmentation, np.ndarray):
        seg = torch.from_numpy(np.array(segmentation))  # a writable copy (PIL arrays are read-only)
        if seg.dim() == 3:
            seg = seg.permute(2, 0, 1)  # (H, W, C) -> (C, H, W)
    elif isinstance(segmentation, Tensor):
        seg = segmentation
    else:
        raise ValueError(f"segmentation: expected a numpy array or torch.Tensor, got {type(segmentation).__name__}")
    if seg.dim() == 2:
        seg = seg[None]
    if seg.dim() != 3:
        raise ValueError(f"segmentation: expected (H, W) or (C, H, W), got {tuple(segmentation.shape)}")
    x1, y1, x2, y2 = (int(v) for v in (box.tolist() if isinstance(box, (Tensor, np.ndarray)) else box))
    if x2 <= x1 or y2 <= y1:
        raise ValueError(f"box: empty box {(x1, y1, x2, y2)} (need x2 > x1 and y2 > y1)")
    _, h_img, w_img = seg.shape
    crop = torch.zeros((1, y2 - y1, x2 - x1), dtype=torch.float64, device=seg.device)  # zero padding
    ya, yb, xa, xb = max(0, y1), min(h_img, y2), max(0, x1), min(w_img, x2)
    if ya < yb and xa < xb:
        crop[0, ya - y1 : yb - y1, xa - x1 : xb - x1] = seg[0, ya:yb, xa:xb].to(torch.float64)  # first channel
    resized = F.interpolate(crop[None], size=(size, size), mode="nearest-exact")[0, 0]
    return resized > threshold


def foreground_union(upsampled: Tensor, threshold: float = MAP_THRESHOLD) -> Tensor:
    """(B, J, H, W) upsampled maps -> (B, H, W) bool union of the thresholded normalised maps.

    NPPP ``norm_and_thresh``: ``(a - min) / (max - min) >= threshold``; ``batch_IoU_binary``:
    ``binary.sum(dim=1) > 0``.
    """
    flat = upsampled.flatten(2)
    lo, hi = flat.amin(dim=-1), flat.amax(dim=-1)  # (torch.aminmax is ~10x slower on CPU)
    span = (hi - lo)[..., None, None]
    # (a - min) / (max - min) >= t  <=>  a >= min + t * (max - min) for max > min (one pass
    # instead of three; moves only pixels within one rounding error of the threshold).
    # A constant map (0/0 = NaN in NPPP) selects no pixel: its cut is +inf.
    cut = torch.where(span > 0, lo[..., None, None] + threshold * span, torch.full_like(span, float("inf")))
    return (upsampled >= cut).amax(dim=1)  # union over the J maps (any)


def mask_iou(pred: Tensor, target: Tensor) -> Tensor:
    """(B, H, W) bool masks -> (B,) float64 IoU; 0 when both are empty (NPPP ``calculate_iou``)."""
    inter = (pred & target).flatten(1).sum(dim=1).to(torch.float64)
    union = (pred | target).flatten(1).sum(dim=1).to(torch.float64)
    return torch.where(union > 0, inter / union.clamp(min=1.0), torch.zeros_like(inter))


def check_masks(masks: object, n: int, size: int = FRAME_SIZE) -> Tensor:
    """``masks`` (n, size, size): bool foreground, or raw intensities thresholded ``> 200``."""
    if not isinstance(masks, Tensor) or tuple(masks.shape) != (n, size, size):
        shape = tuple(masks.shape) if isinstance(masks, Tensor) else type(masks).__name__
        raise ValueError(f"masks: expected a tensor of shape ({n}, {size}, {size}), got {shape}")
    return masks if masks.dtype == torch.bool else masks > MASK_THRESHOLD


def comprehensiveness(
    maps: Tensor,
    masks: Tensor,
    *,
    map_pool: int = 1,
    threshold: float = MAP_THRESHOLD,
    chunk_size: int | None = None,
    topk: int | None = None,
) -> float | None:
    """Comprehensiveness (%): ``100 * mean_i IoU(union_k [norm(up(map_ik)) >= 0.6], mask_i)``.

    maps: (N, J, h, w) ground-truth class prototype maps; masks: (N, 224, 224) bool (see
    :func:`segmentation_to_frame`), or raw intensities (thresholded ``> 200``).
    ``topk``: NPPP's top-k selection of maps (default None: all J). ``None`` for N = 0.
    """
    check_maps("maps", maps)
    n = maps.shape[0]
    masks = check_masks(masks, n)  # moved to the device chunk by chunk
    if n == 0:
        return None
    ious = torch.empty(n, dtype=torch.float64, device=maps.device)
    for sl in iter_chunks(n, chunk_size, maps.device):
        chunk = pool_maps(select_topk_maps(maps[sl], topk).to(torch.float64), map_pool)
        ious[sl] = mask_iou(foreground_union(upsample_maps(chunk, mode="bilinear"), threshold), masks[sl].to(maps.device))
    return 100.0 * float(ious.mean())  # sum(IoUs) / len(IoUs)
