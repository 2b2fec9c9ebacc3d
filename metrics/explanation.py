"""One entry point for all explanation metrics of one evaluated model.

One pass over chunks of images: the clean maps are pooled once, upsampled bicubically
(consistency, stability) and bilinearly (comprehensiveness; distinctiveness in float32, as NPPP's
code: :mod:`metrics.float32_bilinear`); the noisy maps
bicubically (stability). Only per-map argmax positions and per-image IoUs outlive a chunk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ._checks import check_labels, check_maps, check_noisy_maps
from .comprehensiveness import MAP_THRESHOLD, check_masks, foreground_union, mask_iou
from .consistency import consistency_flags, consistency_score
from .distinctiveness import distinctiveness_score, mean_pairwise_iou
from .float32_bilinear import nppp_peaks
from .maps import iter_chunks, pool_maps, select_topk_maps, upsample_maps, upsampled_peaks
from .part_truth import PartTruth, check_part_truth, truth_vectors
from .stability import stability_score, unchanged_fractions

METRIC_KEYS = ("con", "sta", "dis", "comp")


@dataclass
class ExplanationRecords:
    """The scores of :func:`explanation_metrics` and what each image and prototype contributed.

    per_image (N,) float64, percent, absent where the score is undefined:
      ``sta``  the share of the image's J own-class prototypes whose part vector is unchanged
               under noise (the score is the class-balanced mean of these: per class, then over
               classes; equal to their plain mean when classes have equal test images);
      ``dis``  ``100 * (1 - mean pairwise IoU)`` of the image's J boxes (the score is their mean);
      ``comp`` ``100 * IoU`` of the image's map union with its mask (the score is their mean).
    per_prototype (C, J), percent: ``con`` 100 for a consistent prototype, else 0 (the score is
    their mean); ``sta`` the unchanged share over its class's images (NaN for a class without
    images; the score is the mean of the defined ones).
    """

    scores: dict[str, float | None]
    per_image: dict[str, Tensor] = field(default_factory=dict)
    per_prototype: dict[str, Tensor] = field(default_factory=dict)


def explanation_metrics(*args: Any, **kwargs: Any) -> dict[str, float | None]:
    """The scores of :func:`explanation_records` (same arguments)."""
    return explanation_records(*args, **kwargs).scores


def explanation_records(
    clean_maps: Tensor,
    noisy_maps: Tensor | None,
    labels: Tensor,
    parts: PartTruth,
    num_classes: int,
    *,
    map_pool: int = 1,
    masks: Tensor | None = None,
    chunk_size: int | None = None,
    topk: int | None = None,
) -> ExplanationRecords:
    """Consistency, stability, distinctiveness and comprehensiveness, in percent.

    clean_maps, noisy_maps: (N, J, h, w) maps of each image's ground-truth class prototypes
        (higher = more similar) on the clean and the noise-perturbed input (docs/protocol/metrics.md).
    labels: (N,) ground-truth classes in ``[0, num_classes)``; parts: the N images' part keypoints
        in the 224 frame (:func:`metrics.parts.map_parts_to_frame`) or their part masks there
        (:class:`metrics.part_masks.PartMasks`).
    map_pool: 1 (native grid) or 2 (NPPP's 2x2 average pooling), applied to every metric.
    masks: optional (N, 224, 224) foreground masks for comprehensiveness.
    chunk_size: images upsampled at once (memory bound; None: 64 on CUDA, 4 on CPU).
    topk: NPPP's top-k map selection for dis/comp only (default None = all J, as docs/protocol/metrics.md).

    Scores ``{"con", "sta", "dis", "comp"}`` with their per-image and per-prototype parts
    (:class:`ExplanationRecords`); a score is ``None`` when undefined or not
    computable: ``sta`` without noisy maps or without any class with images, ``dis`` for
    J = 1 (no pairs) or N = 0, ``comp`` without masks or for N = 0.
    All tensors are moved to ``clean_maps.device``; the work runs there.
    """
    check_maps("clean_maps", clean_maps)
    n, j = clean_maps.shape[:2]
    dev = clean_maps.device
    if noisy_maps is not None:
        check_noisy_maps(noisy_maps, clean_maps)
    labels = check_labels("labels", labels, n, num_classes, dev)
    parts = check_part_truth(parts, n, "clean_maps").to(dev)
    if masks is not None:
        masks = check_masks(masks, n)  # moved to the device chunk by chunk

    j_dis = j if topk is None else min(topk, j)
    want_dis = j_dis >= 2 and n > 0
    want_bilinear = want_dis or (masks is not None and n > 0)

    peaks_clean = torch.empty((n, j, 2), dtype=torch.int64, device=dev)
    peaks_noisy = torch.empty_like(peaks_clean) if noisy_maps is not None else None
    centres_dis = torch.empty((n, j_dis, 2), dtype=torch.int64, device=dev) if want_dis else None
    ious = torch.empty(n, dtype=torch.float64, device=dev) if masks is not None else None

    for sl in iter_chunks(n, chunk_size, dev):
        raw = clean_maps[sl].to(device=dev, dtype=torch.float64)
        clean = pool_maps(raw, map_pool)
        # docs/protocol/metrics.md "Shared core" 1-2: bicubic upsampling, first argmax (EvalProtoPNet)
        peaks_clean[sl] = upsampled_peaks(clean, "bicubic")
        if peaks_noisy is not None:
            peaks_noisy[sl] = upsampled_peaks(
                pool_maps(noisy_maps[sl].to(device=dev, dtype=torch.float64), map_pool), "bicubic")
        if want_bilinear:
            # NPPP distinctiveness / comprehensiveness: bilinear upsampling of the (top-k) maps
            top = select_topk_maps(raw, topk)
            if centres_dis is not None:  # NPPP's float32 peaks, its ties included
                centres_dis[sl] = nppp_peaks(top, map_pool)
            if ious is not None:
                chosen = clean if top is raw else pool_maps(top, map_pool)
                ious[sl] = mask_iou(foreground_union(upsample_maps(chosen, mode="bilinear"), MAP_THRESHOLD),
                                    masks[sl].to(dev))

    o_clean = truth_vectors(peaks_clean, parts)
    result: dict[str, float | None] = {key: None for key in METRIC_KEYS}
    records = ExplanationRecords(result)
    result["con"] = consistency_score(o_clean, parts.visible, labels, num_classes)
    records.per_prototype["con"] = 100.0 * consistency_flags(o_clean, parts.visible, labels, num_classes).double()
    if peaks_noisy is not None:
        o_noisy = truth_vectors(peaks_noisy, parts)
        result["sta"] = stability_score(o_clean, o_noisy, labels, num_classes)
        records.per_prototype["sta"] = 100.0 * unchanged_fractions(o_clean, o_noisy, labels, num_classes)
        records.per_image["sta"] = 100.0 * (o_clean == o_noisy).all(dim=-1).double().mean(dim=1)
    if centres_dis is not None:
        result["dis"] = distinctiveness_score(centres_dis)
        records.per_image["dis"] = 100.0 * (1.0 - mean_pairwise_iou(centres_dis))
    if ious is not None and n > 0:
        result["comp"] = 100.0 * float(ious.mean())
        records.per_image["comp"] = 100.0 * ious
    return records
