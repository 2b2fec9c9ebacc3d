"""The part ground truth the part metrics read, keypoints or masks, and its part vectors.

Keypoints (CUB, NABirds: :class:`metrics.parts.PartGroundTruth`) follow EvalProtoPNet's rule
(:func:`metrics.parts.part_vectors`); masks (PartImageNet: :class:`metrics.part_masks.PartMasks`)
the mask reading of the same rule (:func:`metrics.part_masks.mask_part_vectors`,
docs/protocol/metrics.md "Parts given as masks"). Consistency, stability and purity take either.
"""
from __future__ import annotations

from torch import Tensor

from .part_masks import PartMasks, mask_part_vectors
from .parts import FRAME_SIZE, HALF_SIZE, PartGroundTruth, check_parts, part_vectors

PartTruth = PartGroundTruth | PartMasks


def check_part_truth(parts: object, n: int, maps_name: str) -> PartTruth:
    """``parts`` must be keypoints or masks of the ``n`` images of ``maps_name``."""
    if isinstance(parts, PartMasks):
        if parts.num_images != n:
            raise ValueError(f"parts: has {parts.num_images} images, {maps_name} has {n}")
        return parts
    return check_parts(parts, n, maps_name)


def truth_vectors(centres: Tensor, parts: PartTruth, half_size: int = HALF_SIZE, size: int = FRAME_SIZE) -> Tensor:
    """Part vector ``o`` (N, J, P) of every (image, prototype) whose peak is at ``centres``."""
    if isinstance(parts, PartMasks):
        return mask_part_vectors(centres, parts, half_size, size)
    return part_vectors(centres, parts, half_size, size)
