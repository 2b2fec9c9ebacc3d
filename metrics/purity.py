"""Purity (%): PIP-Net's part purity of prototypes.

Nauta et al., "PIP-Net: Patch-Based Intuitive Prototypes for Interpretable Image
Classification", CVPR 2023, Sec. 4 "purity"; official code ``util/eval_cub_csv.py``
(``eval_prototypes_cub_parts_csv``): for each prototype, its top-k (k = 10) training images by
presence (the map's maximum), in each the image patch at the maximum, and which CUB parts lie
inside that patch; the prototype's purity is the largest share of its k patches that contain one
same part (``max_part mean_images [part in patch]``). The score is the mean over prototypes.

Differences from PIP-Net (docs/protocol/metrics.md):
- prototypes here are class-specific, so a prototype's top-k images are drawn from the training
  images of its own class (PIP-Net: all training images; its prototypes are shared);
- the maximum is located as for consistency (docs/protocol/metrics.md "Shared core": bicubic upsampling to the
  224 frame, first argmax) and the patch is the ``2 · half_size`` square around it with
  EvalProtoPNet's inclusive bounds (``parts.region_bounds``); PIP-Net maps the latent cell to a
  32 x 32 image patch, hence ``half_size = 16``;
- only visible parts count (the part vector ``o`` of docs/protocol/metrics.md).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_labels, check_maps, check_positive_int
from .maps import pool_maps, upsampled_peaks
from .part_truth import PartTruth, check_part_truth, truth_vectors

PURITY_TOPK = 10  # PIP-Net eval_prototypes_cub_parts_csv: topk = 10 image patches per prototype
PURITY_HALF_SIZE = 16  # PIP-Net: a 32 x 32 patch (patchsize = 32 at 224 px)


def prototype_purities(
    maps: Tensor,
    labels: Tensor,
    parts: PartTruth,
    num_classes: int,
    *,
    topk: int = PURITY_TOPK,
    half_size: int = PURITY_HALF_SIZE,
    map_pool: int = 1,
) -> Tensor:
    """(C, J) purity in [0, 1] of every prototype; NaN for the classes without training images.

    maps: (N, J, h, w) maps of each training image's own-class prototypes; labels (N,);
    parts: the N images' part keypoints or masks in the 224 frame (a mask lies in a patch when the
    patch holds one of its pixels, :mod:`metrics.part_masks`). The top ``min(topk, n_c)`` images of a
    prototype are the largest map maxima among the n_c images of its class (ties: the earlier
    image, a stable sort)."""
    check_maps("maps", maps)
    check_positive_int("topk", topk)
    n, j = maps.shape[:2]
    labels = check_labels("labels", labels, n, num_classes, maps.device)
    parts = check_part_truth(parts, n, "maps").to(maps.device)
    pooled = pool_maps(maps.to(torch.float64), map_pool)
    presence = pooled.flatten(2).amax(dim=-1)  # (N, J)
    purities = torch.full((num_classes, j), float("nan"), dtype=torch.float64, device=maps.device)
    columns = torch.arange(j, device=maps.device)
    for c in range(num_classes):
        members = torch.nonzero(labels == c).squeeze(1)
        if members.numel() == 0:
            continue
        k = min(topk, members.numel())
        order = torch.sort(presence[members], dim=0, descending=True, stable=True).indices[:k]  # (k, J)
        images = members[order]  # (k, J) image index of each prototype's i-th patch
        centres = upsampled_peaks(pooled[images, columns], "bicubic")  # (k, J, 2)
        flat = images.reshape(-1)
        hits = truth_vectors(centres.reshape(-1, 1, 2), parts[flat], half_size=half_size)  # (k·J, 1, P)
        shares = hits.reshape(k, j, -1).to(torch.float64).mean(dim=0)  # (J, P)
        purities[c] = shares.amax(dim=-1) if shares.shape[-1] else 0.0
    return purities


def purity(
    maps: Tensor,
    labels: Tensor,
    parts: PartTruth,
    num_classes: int,
    *,
    topk: int = PURITY_TOPK,
    half_size: int = PURITY_HALF_SIZE,
    map_pool: int = 1,
) -> float | None:
    """Mean purity (percent) over the prototypes of the classes with training images; None if none."""
    values = prototype_purities(maps, labels, parts, num_classes, topk=topk, half_size=half_size,
                                map_pool=map_pool)
    defined = values[~torch.isnan(values)]
    return 100.0 * float(defined.mean()) if defined.numel() else None
