"""Spatial misalignment of prototypical parts (Sacha, Jura, Rymarczyk, Struski, Tabor and Zieliński,
AAAI 2024, "Interpretability benchmark for evaluating spatial misalignment of prototypical parts
explanations"; official code ``spatial_alignment_test/`` of their benchmark, re-used by ProtoViT,
Henrymachiyu/ProtoViT). Pure functions of activation maps; the attack that produces the "after"
maps lives in benchmark/robustness/misalignment.py.

* Attack region (``adversarial_modification.get_all_class_proto_low_activation_bbox_mask``): each
  attacked prototype's map upsampled bicubically to the image, its high-activation box
  (ProtoPNet's ``find_high_activation_crop``: the bounding box of the pixels ≥ the map's
  ``percentile``-th percentile, default 95) widened by ``margin`` pixels (default 10) is kept;
  every other pixel may change. As the official slice, the box ends before ``S − 1``.
* PAC, PRC, PLC (``run_adversarial_test.get_activation_change_metrics``), for the attacked
  prototype with the highest activation before the attack ("top"; activation = the map's maximum):
  ``PAC = 100 · (1 − a_after / a_before)``; ``PRC`` = the number of prototypes of other classes
  more activated than it after, minus before; ``PLC = 100 · (1 − IoU)`` of its high-activation
  pixels (> the 0.9 quantile of its bilinearly upsampled map) before and after, 0 when both are
  empty.
* Maps that are log densities (a method declaring ``log_density_maps``: vMFProto's
  ``log C_D(κ) + κ μᵀz``, whose constant ``log C_D(κ)`` is about +1457 at D = 768, κ = 50): a ratio of
  two such values measures the constant, not the change, so the activation whose relative change PAC
  takes is the density itself, ``exp(map)``: ``PAC = 100 · (1 − exp(a_after − a_before))``
  (:func:`relative_drop`), defined for every image since a density is positive. PRC and PLC compare
  ranks and quantile masks, which ``exp`` does not move.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from metrics.maps import upsample_maps

MISALIGNMENT_PERCENTILE = 95.0  # ProtoPNet find_high_activation_crop's default percentile
MISALIGNMENT_MARGIN = 10  # get_all_class_proto_low_activation_bbox_mask's epsilon_pixels
PLC_QUANTILE = 0.9  # get_activation_change_metrics: torch.quantile(q=0.9)


def high_activation_box(pixel_map: Tensor, percentile: float = MISALIGNMENT_PERCENTILE) -> tuple[int, int, int, int]:
    """``(row_start, row_end, col_start, col_end)`` (ends exclusive) of the pixels of an (S, S) map at
    or above its ``percentile``-th percentile (numpy's linear percentile, as ``np.percentile``)."""
    threshold = torch.quantile(pixel_map.to(torch.float64).flatten(), percentile / 100.0)
    high = pixel_map.to(torch.float64) >= threshold
    rows = torch.nonzero(high.any(dim=1)).flatten()
    cols = torch.nonzero(high.any(dim=0)).flatten()
    return int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1


def attack_masks(maps: Tensor, chosen: Tensor, image_size: int, *, percentile: float = MISALIGNMENT_PERCENTILE,
                 margin: int = MISALIGNMENT_MARGIN) -> Tensor:
    """(B, 1, S, S) float masks, 1 where the attack may change a pixel: ``maps`` (B, J, h, w) of the
    ground-truth class, ``chosen`` (B, k) the attacked prototypes' indices among the J; each one's
    widened high-activation box is 0 (module docstring)."""
    batch = maps.shape[0]
    masks = torch.ones(batch, 1, image_size, image_size, dtype=torch.float32)
    picked = maps.detach().float().cpu().gather(1, chosen.cpu()[:, :, None, None].expand(-1, -1, *maps.shape[-2:]))
    upsampled = upsample_maps(picked, image_size, "bicubic")  # cv2.INTER_CUBIC (metrics/maps.py)
    last = image_size - 1  # the official slice's end: min(box_end + margin, img_size - 1)
    for b in range(batch):
        for k in range(chosen.shape[1]):
            r0, r1, c0, c1 = high_activation_box(upsampled[b, k], percentile)
            masks[b, :, max(r0 - margin, 0):min(r1 + margin, last), max(c0 - margin, 0):min(c1 + margin, last)] = 0
    return masks


def relative_drop(before: Tensor, after: Tensor, *, log_density: bool = False) -> Tensor:
    """``(a_before − a_after) / a_before`` of activations, NaN where ``a_before ≤ 0`` (undefined); for
    log-density maps the activation is ``exp(map)``, so ``1 − exp(after − before)`` (module docstring)."""
    if log_density:
        return -torch.expm1(after - before)
    return torch.where(before > 0, (before - after) / torch.where(before > 0, before, torch.ones_like(before)),
                       torch.full_like(before, float("nan")))


def misalignment_scores(before: Tensor, after: Tensor, chosen: Tensor, own: Tensor, image_size: int, *,
                        log_density: bool = False) -> dict[str, Tensor]:
    """Per image ``PAC``, ``PRC``, ``PLC`` (each (B,) float64; PAC NaN where the top prototype's
    activation before is ≤ 0, where its relative change is undefined). ``before`` / ``after``:
    (B, P, h, w) maps of every prototype of every class before and after the attack; ``chosen``
    (B, k): the attacked prototypes (indices among the P); ``own`` (B, P) bool: the prototypes of
    the image's ground-truth class; ``log_density``: the maps are log densities (PAC on ``exp``)."""
    peak_before = before.flatten(2).amax(dim=2).to(torch.float64)
    peak_after = after.flatten(2).amax(dim=2).to(torch.float64)
    first = peak_before.gather(1, chosen).argmax(dim=1, keepdim=True)  # np.argmax: the first maximum
    top = chosen.gather(1, first)  # (B, 1)
    top_before = peak_before.gather(1, top)[:, 0]
    top_after = peak_after.gather(1, top)[:, 0]
    pac = 100 * relative_drop(top_before, top_after, log_density=log_density)
    others = ~own
    rank_before = ((peak_before > top_before[:, None]) & others).sum(dim=1)
    rank_after = ((peak_after > top_after[:, None]) & others).sum(dim=1)
    prc = (rank_after - rank_before).to(torch.float64)
    index = top[:, :, None, None].expand(-1, -1, *before.shape[-2:])
    maps = torch.cat([before.gather(1, index), after.gather(1, index)], dim=1).float()  # (B, 2, h, w)
    upsampled = F.interpolate(maps, size=(image_size, image_size), mode="bilinear", align_corners=False)
    flat = upsampled.flatten(2)
    high = flat > torch.quantile(flat, PLC_QUANTILE, dim=2, keepdim=True)
    union = (high[:, 0] | high[:, 1]).sum(dim=1)
    inter = (high[:, 0] & high[:, 1]).sum(dim=1)
    iou = (inter.float() / union.clamp_min(1).float()).to(torch.float64)  # the official float32 quotient
    plc = torch.where(union > 0, 100 * (1 - iou), torch.zeros_like(iou))
    return {"pac": pac, "prc": prc, "plc": plc}
