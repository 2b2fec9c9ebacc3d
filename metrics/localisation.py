"""Localisation (%): the share of each prototype's activation mass that lies on the object.

The attribution-localisation measure of Kohlbrenner et al., "Towards best practice in explaining
neural network decisions with LRP", IJCNN 2020 (Quantus ``AttributionLocalisation``; CaBRNet's
relevance analysis and QuanProto's inside/outside relevance are of the same family):
``mass inside the ground truth / total mass``. Here the mass is a prototype map of the
ground-truth class, upsampled bilinearly to the 224 frame (as comprehensiveness, NPPP) and
shifted by its minimum, so the share is invariant to the map's offset and sign convention
(cosine maps and log-likelihood maps alike); a constant map spreads its mass uniformly (its share
is the object's area). The score is the mean over images and their J maps.

Differences (docs/protocol/metrics.md): Quantus keeps only positive attributions (a
log-likelihood map has none); the object is the segmentation mask in the box-cropped frame,
because CUB-format images are cropped to the bounding box, which then is the whole frame.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_maps
from .comprehensiveness import check_masks
from .maps import iter_chunks, pool_maps, upsample_maps


def localisation_shares(maps: Tensor, masks: Tensor, *, map_pool: int = 1, chunk_size: int | None = None) -> Tensor:
    """(N, J) share in [0, 1] of each upsampled, min-shifted map's mass inside the image's mask."""
    check_maps("maps", maps)
    n, j = maps.shape[:2]
    masks = check_masks(masks, n)
    shares = torch.empty((n, j), dtype=torch.float64, device=maps.device)
    for sl in iter_chunks(n, chunk_size, maps.device):
        up = upsample_maps(pool_maps(maps[sl].to(torch.float64), map_pool), mode="bilinear")
        mass = (up - up.flatten(2).amin(dim=-1)[..., None, None]).flatten(2)  # (n, J, 224²) ≥ 0
        inside = masks[sl].to(device=maps.device, dtype=torch.float64).flatten(1)[:, None, :]
        total = mass.sum(dim=-1)
        uniform = inside.mean(dim=-1).expand_as(total)  # a constant map: the object's area share
        shares[sl] = torch.where(total > 0, (mass * inside).sum(dim=-1) / total.clamp_min(1e-300), uniform)
    return shares


def localisation(maps: Tensor, masks: Tensor, *, map_pool: int = 1, chunk_size: int | None = None) -> float | None:
    """Mean share (percent) over images and maps; None for zero images."""
    shares = localisation_shares(maps, masks, map_pool=map_pool, chunk_size=chunk_size)
    return 100.0 * float(shares.mean()) if shares.numel() else None
