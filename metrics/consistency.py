"""Consistency (%): docs/protocol/metrics.md section "Consistency".

Official code: EvalProtoPNet ``util/eval_interpretability.py::evaluate_consistency``
(NPPP ``eval/consistency.py`` is the same code).

Classes without test images: the official code cannot evaluate them (``np.stack`` of an
empty list raises). Here their prototypes count as inconsistent, which is what the formula
of docs/protocol/metrics.md gives (all ratios ``0 / max(1, 0) = 0``), and the C·J denominator is kept;
a ``UserWarning`` names how many classes were affected.

Parts given as masks (PartImageNet) enter through the same part vectors: a part lies under a
prototype's peak when the peak's region holds a pixel of its mask (:mod:`metrics.part_masks`,
docs/protocol/metrics.md "Parts given as masks").
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from ._checks import check_bool, check_labels, check_maps
from .maps import peak_positions
from .part_truth import PartTruth, check_part_truth, truth_vectors

PART_THRESHOLD = 0.8  # EvalProtoPNet evaluate_consistency(part_thresh=0.8)


def _check_part_vectors(o: Tensor, visible: Tensor, name: str = "o") -> tuple[int, int, int]:
    if not isinstance(o, Tensor) or o.dim() != 3:
        shape = tuple(o.shape) if isinstance(o, Tensor) else type(o).__name__
        raise ValueError(f"{name}: expected a bool tensor of shape (N, J, P), got {shape}")
    n, j, p = o.shape
    check_bool(name, o, (n, j, p))
    check_bool("visible", visible, (n, p))
    # EvalProtoPNet asserts ((1 - mask) * proto_to_part).sum() == 0
    if bool((o & ~visible.to(o.device)[:, None, :]).any()):
        raise ValueError(f"{name}: marks a part that is not visible (o must imply visible)")
    return n, j, p


def part_hit_ratios(o: Tensor, visible: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """``ratio[c, k, p] = sum_i o_i[p] / max(1, sum_i m_i[p])`` over class c's images: (C, J, P) float64.

    o: (N, J, P) bool part vectors of each image's own-class prototypes; visible: (N, P) bool (m).
    """
    n, j, p = _check_part_vectors(o, visible)
    labels = check_labels("labels", labels, n, num_classes, o.device)
    dev = o.device
    # proto_to_part.sum(axis=0): per class and prototype, how many images hit part p
    hits = torch.zeros((num_classes, j, p), dtype=torch.float64, device=dev).index_add_(
        0, labels, o.to(torch.float64)
    )
    # proto_part_mask.sum(axis=0), zeros replaced by 1 ("prevent 0 from being denominator")
    seen = torch.zeros((num_classes, p), dtype=torch.float64, device=dev).index_add_(
        0, labels, visible.to(device=dev, dtype=torch.float64)
    )
    return hits / seen.clamp(min=1.0)[:, None, :]


def consistency_flags(
    o: Tensor, visible: Tensor, labels: Tensor, num_classes: int, threshold: float = PART_THRESHOLD
) -> Tensor:
    """(C, J) bool: prototype (c, k) is consistent iff ``max_p ratio_p >= threshold`` (docs/protocol/metrics.md)."""
    ratios = part_hit_ratios(o, visible, labels, num_classes)
    return (ratios >= threshold).any(dim=-1)  # mean_part = (ratio >= part_thresh); consistent iff any


def _warn_empty_classes(labels: Tensor, num_classes: int) -> None:
    present = torch.zeros(num_classes, dtype=torch.bool, device=labels.device)
    present[labels] = True
    missing = num_classes - int(present.sum())
    if missing:
        warnings.warn(
            f"consistency: {missing} of {num_classes} classes have no test images; "
            "their prototypes count as inconsistent (C·J denominator, docs/protocol/metrics.md)",
            stacklevel=3,
        )


def consistency_score(
    o: Tensor, visible: Tensor, labels: Tensor, num_classes: int, threshold: float = PART_THRESHOLD
) -> float:
    """Consistency in percent from part vectors: ``100 * consistent / (C·J)`` (docs/protocol/metrics.md)."""
    flags = consistency_flags(o, visible, labels, num_classes, threshold)
    _warn_empty_classes(labels.to(o.device), num_classes)
    return 100.0 * float(flags.to(torch.float64).mean())  # all_proto_consis.mean() * 100


def consistency(
    maps: Tensor,
    labels: Tensor,
    parts: PartTruth,
    num_classes: int,
    *,
    map_pool: int = 1,
    chunk_size: int | None = None,
    threshold: float = PART_THRESHOLD,
) -> float:
    """Consistency (%) from the (N, J, h, w) maps of each image's ground-truth class prototypes.

    bicubic upsampling -> first argmax -> 72-px region -> part vectors (keypoints or masks:
    :mod:`metrics.part_truth`) -> :func:`consistency_score`.
    """
    check_maps("maps", maps)
    check_part_truth(parts, maps.shape[0], "maps")
    centres = peak_positions(maps, "bicubic", map_pool=map_pool, chunk_size=chunk_size)
    parts = parts.to(maps.device)
    o = truth_vectors(centres, parts)
    return consistency_score(o, parts.visible, labels, num_classes, threshold)
