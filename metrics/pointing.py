"""Keypoint pointing accuracy (``pointing``), after PF-CBM (Ramachandram, "Spatially Grounded Concept
Bottleneck Models via Part-Factorized Attention", arXiv 2606.04364): the share of a part's maps
whose peak falls on that part's keypoint. PF-CBM's part queries carry a part name; a prototype or
QPM feature does not, so each is given the part it points to most often on its class's training
images. Every choice the paper leaves open is stated in docs/protocol/metrics.md ("pointing"):

- peak: the first maximum of the map upsampled to the 224 frame (bicubic, after ``map_pool``),
  the rule consistency uses (:func:`metrics.maps.peak_positions`);
- hit: the peak lies within ``radius`` pixels (Euclidean, 224 frame) of the part's keypoint, the
  part visible; ``radius`` = 0.1 · 224 = 22.4 px, PCK@0.1 of the box side (the crop is the box);
- a prototype's part: over the training images of its class, the visible part it hits most
  often (ties: the lower part index); a prototype that hits no part there has none, and every
  test pair of it counts as a miss;
- the score: hits over the (test image, ground-truth-class prototype) pairs whose part is
  visible in the image (pairs of a part-less prototype all count), in percent.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_labels
from .maps import peak_positions
from .parts import FRAME_SIZE, PartGroundTruth, check_parts

#: PCK@0.1: a tenth of the (box-cropped) frame's side
POINTING_RADIUS = 0.1 * FRAME_SIZE


def part_hits(maps: Tensor, parts: PartGroundTruth, radius: float = POINTING_RADIUS, *,
              map_pool: int = 1) -> Tensor:
    """(N, J, P) bool: map j's peak within ``radius`` of image n's visible part p."""
    check_parts(parts, maps.shape[0], "maps")
    peaks = peak_positions(maps, map_pool=map_pool).to(torch.float64)  # (row, col)
    keypoints = parts.part_px.to(device=maps.device, dtype=torch.float64).flip(-1)  # (x, y) → (row, col)
    distance = (peaks[:, :, None, :] - keypoints[:, None, :, :]).norm(dim=-1)
    return (distance <= radius) & parts.visible.to(maps.device)[:, None, :]


def prototype_parts(train_hits: Tensor, train_labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """(C, J) part of each prototype (most hits on its class's training images, first on ties) and
    (C, J) whether it hit any part at all."""
    n, J, P = train_hits.shape
    labels = check_labels("train_labels", train_labels, n, num_classes, train_hits.device)
    counts = torch.zeros((num_classes, J, P), dtype=torch.int64, device=train_hits.device)
    counts.index_add_(0, labels, train_hits.to(torch.int64))
    best = counts.max(dim=2)
    return best.indices, best.values > 0


def pointing(maps: Tensor, parts: PartGroundTruth, labels: Tensor, train_maps: Tensor,
             train_parts: PartGroundTruth, train_labels: Tensor, num_classes: int, *,
             radius: float = POINTING_RADIUS, map_pool: int = 1) -> float | None:
    """Pointing accuracy (percent) of the test ``maps`` (N×J×h×w of each image's ground-truth class);
    None where no pair is counted."""
    if maps.shape[1] != train_maps.shape[1]:
        raise ValueError(f"train_maps: J = {train_maps.shape[1]} differs from maps' J = {maps.shape[1]}")
    labels = check_labels("labels", labels, maps.shape[0], num_classes, maps.device)
    part, has_part = prototype_parts(part_hits(train_maps, train_parts, radius, map_pool=map_pool),
                                     train_labels.to(train_maps.device), num_classes)
    part, has_part = part.to(maps.device)[labels], has_part.to(maps.device)[labels]  # (N, J)
    hits = part_hits(maps, parts, radius, map_pool=map_pool)
    on_part = hits.gather(2, part[:, :, None])[:, :, 0]
    visible = parts.visible.to(maps.device).gather(1, part)
    counted = torch.where(has_part, visible, torch.ones_like(visible))
    total = int(counted.sum())
    if total == 0:
        return None
    return 100.0 * int((on_part & has_part & counted).sum()) / total
