"""Stability (%): docs/protocol/metrics.md section "Stability".

Official code: EvalProtoPNet ``util/eval_interpretability.py::evaluate_stability``: per
prototype, the fraction of its class's test images whose whole part vector ``o`` is the same
on the clean and the noisy pass; the score is the mean over prototypes, times 100.

The noise itself is added to the model input by the caller; these functions only compare
part vectors (or the maps of the two passes).

Classes without test images: a prototype's fraction is 0/0 there (NaN in the official code,
which would turn the whole score into NaN). Such prototypes are left out of the mean;
``None`` is returned when no class has an image.

Parts given as masks (PartImageNet) enter through the same part vectors (:mod:`metrics.part_masks`,
docs/protocol/metrics.md "Parts given as masks").
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_bool, check_labels, check_maps, check_noisy_maps
from .maps import peak_positions
from .part_truth import PartTruth, check_part_truth, truth_vectors


def unchanged_fractions(o_clean: Tensor, o_noisy: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """(C, J) float64: per prototype, the fraction of its class's images with ``o`` unchanged.

    ``is_equal = (|o - o_noise|.sum(-1) == 0)``; ``proto_stability = is_equal.mean()``
    (EvalProtoPNet). NaN for classes without images.
    """
    if not isinstance(o_clean, Tensor) or o_clean.dim() != 3:
        shape = tuple(o_clean.shape) if isinstance(o_clean, Tensor) else type(o_clean).__name__
        raise ValueError(f"o_clean: expected a bool tensor of shape (N, J, P), got {shape}")
    check_bool("o_clean", o_clean, tuple(o_clean.shape))
    check_bool("o_noisy", o_noisy, tuple(o_clean.shape))
    n, j, _ = o_clean.shape
    dev = o_clean.device
    labels = check_labels("labels", labels, n, num_classes, dev)
    same = (o_clean == o_noisy.to(dev)).all(dim=-1).to(torch.float64)  # (N, J): whole 15-part vector equal
    unchanged = torch.zeros((num_classes, j), dtype=torch.float64, device=dev).index_add_(0, labels, same)
    images = torch.bincount(labels, minlength=num_classes).to(torch.float64)  # images per class
    return unchanged / images[:, None]  # 0/0 -> NaN for classes without images


def stability_score(o_clean: Tensor, o_noisy: Tensor, labels: Tensor, num_classes: int) -> float | None:
    """Stability in percent: ``100 * mean`` over prototypes of classes with >= 1 test image.

    ``None`` when no class has a test image (undefined).
    """
    fractions = unchanged_fractions(o_clean, o_noisy, labels, num_classes)
    defined = fractions[~torch.isnan(fractions)]
    if defined.numel() == 0:
        return None
    return 100.0 * float(defined.mean())  # all_proto_stability.mean() * 100


def stability(
    clean_maps: Tensor,
    noisy_maps: Tensor,
    labels: Tensor,
    parts: PartTruth,
    num_classes: int,
    *,
    map_pool: int = 1,
    chunk_size: int | None = None,
) -> float | None:
    """Stability (%) from the clean and noisy (N, J, h, w) maps of the ground-truth class prototypes."""
    check_maps("clean_maps", clean_maps)
    check_noisy_maps(noisy_maps, clean_maps)
    check_part_truth(parts, clean_maps.shape[0], "clean_maps")
    parts = parts.to(clean_maps.device)
    o_clean = truth_vectors(peak_positions(clean_maps, "bicubic", map_pool=map_pool, chunk_size=chunk_size), parts)
    o_noisy = truth_vectors(
        peak_positions(noisy_maps.to(clean_maps.device), "bicubic", map_pool=map_pool, chunk_size=chunk_size), parts
    )
    return stability_score(o_clean, o_noisy, labels, num_classes)
