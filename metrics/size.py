"""Explanation size: how many prototypes an explanation shows, locally and globally.

PIP-Net (Nauta et al., CVPR 2023, Sec. 4 "explanation size"; official ``util/eval_cub_csv.py``
and ``pipnet/test.py``): the *local* size is the number of prototypes that are present in an image
and connected to its predicted class; the *global* size is the number of prototypes with a
non-zero weight to some class. QuanProto's "compactness" counts the same two quantities.

Here both are read from ``prototype_contributions`` (what each prototype of a class adds to its
logit), which every adapter provides (docs/protocol/metrics.md):
- ``size_local``: per test image, the prototypes of the predicted class whose contribution is at
  least ``tau`` times the largest one (PIP-Net: presence > 0.1 with a non-zero weight; a
  contribution is presence x weight, so τ = 0.1 is the same cut relative to the top prototype),
  0 when no contribution is positive; the mean over images;
- ``size_global``: the prototypes whose contribution to their own class's logit is non-zero on
  at least one test image of that class (a pruned or zero-weight prototype never is).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_labels

LOCAL_SIZE_TAU = 0.1  # PIP-Net: a prototype is present above 0.1 (relative here, see above)


def _check_contributions(contributions: object) -> Tensor:
    if not isinstance(contributions, Tensor) or contributions.dim() != 2 or not contributions.is_floating_point():
        shape = tuple(contributions.shape) if isinstance(contributions, Tensor) else type(contributions).__name__
        raise ValueError(f"contributions: expected a floating tensor of shape (N, J), got {shape}")
    if contributions.numel() and not bool(torch.isfinite(contributions).all()):
        raise ValueError("contributions: contains NaN or infinite values")
    return contributions


def local_sizes(contributions: Tensor, tau: float = LOCAL_SIZE_TAU) -> Tensor:
    """(N,) number of prototypes with ``contribution ≥ tau · max contribution`` of each image
    (0 where the largest contribution is ≤ 0)."""
    contributions = _check_contributions(contributions).to(torch.float64)
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau: expected a value in (0, 1], got {tau!r}")
    top = contributions.amax(dim=1, keepdim=True)
    counted = (contributions >= tau * top) & (top > 0)
    return counted.sum(dim=1)


def size_local(contributions: Tensor, tau: float = LOCAL_SIZE_TAU) -> float | None:
    """Mean local explanation size over the images (prototypes per image); None for no images."""
    sizes = local_sizes(contributions, tau)
    return float(sizes.to(torch.float64).mean()) if sizes.numel() else None


def size_global(contributions: Tensor, labels: Tensor, num_classes: int) -> int:
    """Number of prototypes (of C·J) with a non-zero contribution to their class's logit on at
    least one image of that class. ``contributions``: (N, J) of each image's ground-truth class."""
    contributions = _check_contributions(contributions)
    n, j = contributions.shape
    labels = check_labels("labels", labels, n, num_classes, contributions.device)
    nonzero_images = torch.zeros((num_classes, j), dtype=torch.int64, device=contributions.device)
    nonzero_images.index_add_(0, labels, (contributions != 0).to(torch.int64))
    return int((nonzero_images > 0).sum())
