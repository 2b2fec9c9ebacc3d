"""ProtoPNet's box reading of which parts matter (recorded beside the headline map reading for ProtoPNet only,
so its FunnyBirds numbers compare with published ones; docs/protocol/funnybirds.md). Each prototype of the
class is read as the box of its upsampled similarity map's pixels at or above the map's 95th percentile
(ProtoPNet ``helpers.find_high_activation_crop``: rows and columns of the mask's first and last pixels, the
upper ends exclusive); the union of the boxes covers a share of each part's 5×5-dilated mask, and a part is
important at threshold t when that share exceeds t (Opłatek, Rymarczyk and Zieliński, xAI 2024,
hamer101/FunnyBirds_PrototypesRevisited ``SSMExplainer.get_important_parts``, "the original approach to
calculate P for prototypes"). A part with two colours (eye01, eye02) is covered over both masks together;
a part absent from the image (empty mask) is never important."""
from __future__ import annotations

import numpy as np

from metrics.funnybirds_parts import THRESHOLDS, dilated_masks

BOX_PERCENTILE = 95  # find_high_activation_crop(activation_map, percentile=95)


def high_activation_box(activation: np.ndarray, percentile: float = BOX_PERCENTILE) -> tuple[int, int, int, int]:
    """``(lower_y, upper_y, lower_x, upper_x)``, upper ends exclusive, of the pixels ≥ the map's percentile."""
    rows, cols = np.nonzero(activation >= np.percentile(activation, percentile))
    return int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1


def box_important_parts(maps: np.ndarray, part_map: np.ndarray, thresholds: np.ndarray = THRESHOLDS,
                        masks: tuple[list[str], np.ndarray] | None = None) -> tuple[list[list[str]], list[list[str]]]:
    """Per threshold the important parts, without and with background objects: ``maps`` (J, S, S) the
    class's prototype maps upsampled to the part map's size (``masks``: the part map's
    ``dilated_masks(part_map, with_bg=True)`` where the caller has them)."""
    cover = np.zeros(part_map.shape[:2])
    for activation in maps:
        y0, y1, x0, x1 = high_activation_box(activation)
        cover[y0:y1, x0:x1] = 1.0
    keys, dilated = masks if masks is not None else dilated_masks(part_map, with_bg=True)
    covered: dict[str, float] = {}
    area: dict[str, float] = {}
    for key, mask in zip(keys, dilated):
        covered[key] = covered.get(key, 0.0) + float((cover * mask).sum())
        area[key] = area.get(key, 0.0) + float(mask.sum())
    share = {key: covered[key] / area[key] for key in covered if area[key] > 0}
    with_bg = [[key for key, value in share.items() if value > t] for t in thresholds]
    return [[k for k in keys_t if not k.startswith("bg_")] for keys_t in with_bg], with_bg
