"""A prototype method's explanation as the FunnyBirds protocols read it: the class evidence map
(:func:`metrics.class_evidence.class_evidence_maps`: each of the class's prototype maps min-max
normalised, times its contribution to the class logit, summed; Opłatek, Rymarczyk and Zieliński, xAI 2024)
upsampled bilinearly to the part map's size, then summed in each dilated part mask
(:func:`metrics.funnybirds_parts.part_importances`), with the map's sum over the image as the total the
thresholds scale. One rule for every method (docs/protocol/funnybirds.md)."""
from __future__ import annotations

import numpy as np
from torch import Tensor

from metrics.class_evidence import class_evidence_maps
from metrics.funnybirds import Explanation
from metrics.funnybirds_parts import dilated_masks, part_importances
from metrics.maps import upsample_maps


def part_explanations(maps: Tensor, contributions: Tensor, part_map: np.ndarray,
                      masks: tuple[list[str], np.ndarray] | None = None) -> list[Explanation]:
    """One image, K classes: ``maps`` (K, J, h, w) each class's prototype maps, ``contributions`` (K, J)
    what each adds to its class logit, ``part_map`` (S, S, 3) the image's part map (``masks``: its
    ``dilated_masks(part_map, with_bg=True)`` where the caller has them). Returns K explanations."""
    if part_map.ndim != 3 or part_map.shape[0] != part_map.shape[1]:
        raise ValueError(f"part_map must be a square (S, S, 3) colour map; got shape {part_map.shape}")
    evidence = upsample_maps(class_evidence_maps(maps, contributions), size=part_map.shape[0], mode="bilinear")
    keys, dilated = masks if masks is not None else dilated_masks(part_map, with_bg=True)
    scores = part_importances(keys, dilated, evidence.cpu().numpy())
    return [Explanation(score, float(total)) for score, total in zip(scores, evidence.sum(dim=(1, 2)).tolist())]
