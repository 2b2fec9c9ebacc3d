"""metrics/funnybirds_boxes.py: ProtoPNet's box reading against its source algorithm written out as loops
(ProtoPNet helpers.find_high_activation_crop; the coverage of Opłatek et al.'s SSMExplainer)."""
from __future__ import annotations

import numpy as np
import pytest

from metrics.funnybirds_boxes import box_important_parts, high_activation_box
from metrics.funnybirds_parts import COLOURS_TO_PART, THRESHOLDS, alpha


def _crop_by_loops(activation: np.ndarray, percentile: float = 95) -> tuple[int, int, int, int]:
    """find_high_activation_crop's loops: the first and last row and column holding a pixel ≥ the percentile."""
    threshold = np.percentile(activation, percentile)
    mask = (activation >= threshold).astype(float)
    rows = [i for i in range(mask.shape[0]) if mask[i].max() > 0.5]
    cols = [j for j in range(mask.shape[1]) if mask[:, j].max() > 0.5]
    return rows[0], rows[-1] + 1, cols[0], cols[-1] + 1


@pytest.mark.parametrize("seed", range(5))
def test_the_box_is_find_high_activation_crop(seed: int) -> None:
    activation = np.random.default_rng(seed).normal(size=(40, 40)).cumsum(axis=0)
    assert high_activation_box(activation) == _crop_by_loops(activation)


def _coverage_by_loops(maps: np.ndarray, part_map: np.ndarray) -> dict[str, float]:
    size = part_map.shape[0]
    cover = np.zeros((size, size))
    for m in maps:
        y0, y1, x0, x1 = _crop_by_loops(m)
        cover[y0:y1, x0:x1] = 1
    covered: dict[str, float] = {}
    area: dict[str, float] = {}
    colours = {**{c: alpha(k) for c, k in COLOURS_TO_PART.items()},
               **{(204, 204, 204 + j): f"bg_{j:03d}" for j in range(50)}}
    for colour, key in colours.items():
        hit = np.all(part_map == colour, axis=-1)
        for y in range(size):
            for x in range(size):
                near = hit[max(y - 2, 0):y + 3, max(x - 2, 0):x + 3].any()  # the 5×5 dilation
                covered[key] = covered.get(key, 0.0) + near * cover[y, x]
                area[key] = area.get(key, 0.0) + near
    return {k: covered[k] / area[k] for k in covered if area[k] > 0}


def test_important_parts_are_those_the_boxes_cover_beyond_the_threshold() -> None:
    rng = np.random.default_rng(3)
    part_map = np.zeros((32, 32, 3), dtype=np.uint8)
    part_map[2:8, 20:30] = (255, 255, 0)  # beak
    part_map[20:30, 2:12] = (0, 0, 255)  # tail
    part_map[12:16, 12:16] = (255, 255, 253)  # eye01
    part_map[16:18, 12:16] = (255, 255, 254)  # eye02: one part with eye01
    part_map[28:32, 28:32] = (204, 204, 206)  # background object 2
    maps = rng.normal(size=(3, 32, 32))
    maps[0, 3:7, 22:28] += 10  # one prototype on the beak
    with_bg = box_important_parts(maps, part_map)[1]
    share = _coverage_by_loops(maps, part_map)
    for t, keys in zip(THRESHOLDS, with_bg):
        assert keys == [k for k, v in share.items() if v > t]
    parts_only = box_important_parts(maps, part_map)[0]
    assert "beak" in parts_only[-1] and all(not k.startswith("bg_") for keys in parts_only for k in keys)
    assert "foot" not in share  # absent from the image: never important
