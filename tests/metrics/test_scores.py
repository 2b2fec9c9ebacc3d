"""Known answers of docs/protocol/metrics.md for consistency, stability, distinctiveness, accuracy and
comprehensiveness, each derived by hand (see the comments), plus their boundary cases."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from metrics import (
    PartGroundTruth,
    accuracy,
    comprehensiveness,
    consistency,
    consistency_flags,
    consistency_score,
    distinctiveness,
    distinctiveness_score,
    foreground_union,
    iou_72,
    mask_iou,
    part_hit_ratios,
    part_vectors,
    segmentation_to_frame,
    stability,
    stability_score,
    unchanged_fractions,
)

P = 15
BEAK, CROWN = 1, 4  # 0-based part ids of docs/protocol/metrics.md's example


def _parts(per_image: list[dict[int, tuple[int, int]]]) -> PartGroundTruth:
    """Parts already in the 224 frame, ``{part id: (x, y)}`` per image; absent = invisible."""
    px = torch.zeros(len(per_image), P, 2, dtype=torch.int64)
    vis = torch.zeros(len(per_image), P, dtype=torch.bool)
    for i, parts in enumerate(per_image):
        for p, xy in parts.items():
            px[i, p] = torch.tensor(xy)
            vis[i, p] = True
    return PartGroundTruth(px, vis)


def _one_hot_224(centres: list[list[tuple[int, int]]]) -> torch.Tensor:
    """(N, J, 224, 224) maps with a single 1 at each (row, col): upsampling 224 -> 224 is the
    identity for bicubic and bilinear (weights (0, 1, 0, 0) at t = 0), so the argmax is the centre."""
    maps = torch.zeros(len(centres), len(centres[0]), 224, 224)
    for i, row in enumerate(centres):
        for j, (r, c) in enumerate(row):
            maps[i, j, r, c] = 1.0
    return maps


# docs/protocol/metrics.md consistency example: centres (100,100), (50,50), (200,200), (10,10)
CENTRES = [(100, 100), (50, 50), (200, 200), (10, 10)]
EXAMPLE = [
    {BEAK: (120, 90), CROWN: (150, 80)},  # region 64..136: beak in; crown x=150 > 136 out
    {BEAK: (60, 40)},  # region 14..86: in
    {BEAK: (180, 170)},  # region 164..224: in
    {CROWN: (30, 40)},  # region 0..46: in; beak invisible
]


def _example_o(images: list[dict[int, tuple[int, int]]]) -> tuple[torch.Tensor, PartGroundTruth]:
    parts = _parts(images)
    centres = torch.tensor([[c] for c in CENTRES[: len(images)]])
    return part_vectors(centres, parts), parts


def test_consistency_example_ratios_and_flag() -> None:
    o, parts = _example_o(EXAMPLE)
    labels = torch.zeros(4, dtype=torch.int64)
    ratios = part_hit_ratios(o, parts.visible, labels, 1)
    assert ratios[0, 0, BEAK] == 1.0  # 3/3
    assert ratios[0, 0, CROWN] == 0.5  # 1/2
    assert ratios[0, 0].sum() == 1.5  # every other part: 0 / max(1, 0)
    assert consistency_flags(o, parts.visible, labels, 1).tolist() == [[True]]
    assert consistency_score(o, parts.visible, labels, 1) == 100.0
    # end to end through one-hot maps
    assert consistency(_one_hot_224([[c] for c in CENTRES]), labels, parts, 1) == 100.0


def test_consistency_example_two_of_three_is_inconsistent() -> None:
    moved = [dict(d) for d in EXAMPLE]
    moved[2][BEAK] = (100, 100)  # outside rows/cols 164..224
    o, parts = _example_o(moved)
    labels = torch.zeros(4, dtype=torch.int64)
    ratios = part_hit_ratios(o, parts.visible, labels, 1)
    assert math.isclose(float(ratios[0, 0, BEAK]), 2 / 3)
    assert consistency_flags(o, parts.visible, labels, 1).tolist() == [[False]]
    assert consistency_score(o, parts.visible, labels, 1) == 0.0


def test_consistency_four_of_five_reaches_threshold() -> None:
    # five images, beak visible in all, hit in 4: 4/5 = 0.8 >= 0.8 -> consistent
    parts = _parts([{BEAK: (100, 100)}] * 5)
    centres = torch.tensor([[(100, 100)]] * 4 + [[(200, 10)]])
    o = part_vectors(centres, parts)
    labels = torch.zeros(5, dtype=torch.int64)
    assert float(part_hit_ratios(o, parts.visible, labels, 1)[0, 0, BEAK]) == 0.8
    assert consistency_score(o, parts.visible, labels, 1) == 100.0
    # 3 of 5 = 0.6 -> not
    o2 = part_vectors(torch.tensor([[(100, 100)]] * 3 + [[(200, 10)]] * 2), parts)
    assert consistency_score(o2, parts.visible, labels, 1) == 0.0


def test_consistency_flags_1011_give_75() -> None:
    # 2 classes x 2 prototypes, one image each, beak at (100, 100); flags [1, 0, 1, 1]
    parts = _parts([{BEAK: (100, 100)}, {BEAK: (100, 100)}])
    centres = torch.tensor([[(100, 100), (200, 10)], [(100, 100), (90, 110)]])
    labels = torch.tensor([0, 1])
    o = part_vectors(centres, parts)
    assert consistency_flags(o, parts.visible, labels, 2).tolist() == [[True, False], [True, True]]
    assert consistency_score(o, parts.visible, labels, 2) == 75.0


def test_consistency_part_visible_in_single_image() -> None:
    # crown visible only in image 0 of the class and hit there: 1 / max(1, 1) = 1 -> consistent
    parts = _parts([{CROWN: (30, 40)}, {}, {}])
    labels = torch.zeros(3, dtype=torch.int64)
    hit = part_vectors(torch.tensor([[(40, 30)], [(200, 200)], [(200, 200)]]), parts)
    assert consistency_score(hit, parts.visible, labels, 1) == 100.0
    miss = part_vectors(torch.tensor([[(200, 200)]] * 3), parts)
    assert consistency_score(miss, parts.visible, labels, 1) == 0.0


def test_consistency_class_without_images_counts_as_inconsistent() -> None:
    parts = _parts([{BEAK: (100, 100)}])
    o = part_vectors(torch.tensor([[(100, 100)]]), parts)
    with pytest.warns(UserWarning, match="1 of 2 classes"):
        assert consistency_score(o, parts.visible, torch.tensor([0]), 2) == 50.0  # C·J = 2 denominators


def test_consistency_rejects_hits_on_invisible_parts() -> None:
    o = torch.zeros(1, 1, P, dtype=torch.bool)
    o[0, 0, 3] = True
    with pytest.raises(ValueError, match="not visible"):
        consistency_score(o, torch.zeros(1, P, dtype=torch.bool), torch.tensor([0]), 1)


def _o(sets: list[set[int]]) -> torch.Tensor:
    o = torch.zeros(len(sets), 1, P, dtype=torch.bool)
    for i, s in enumerate(sets):
        for p in s:
            o[i, 0, p] = True
    return o


def test_stability_example() -> None:
    clean = _o([{BEAK}, set(), {BEAK, CROWN}])
    noisy = _o([{BEAK}, set(), {BEAK}])  # image 2 changed; image 1 "no part" in both: unchanged
    labels = torch.zeros(3, dtype=torch.int64)
    assert math.isclose(float(unchanged_fractions(clean, noisy, labels, 1)[0, 0]), 2 / 3)
    assert math.isclose(stability_score(clean, noisy, labels, 1), 200 / 3)
    # second prototype at 1.0: (2/3 + 1) / 2 = 83.33
    clean2, noisy2 = torch.cat([clean, clean], 1), torch.cat([noisy, clean], 1)
    assert math.isclose(stability_score(clean2, noisy2, labels, 1), 250 / 3)
    assert round(stability_score(clean2, noisy2, labels, 1), 2) == 83.33


def test_stability_end_to_end_with_maps() -> None:
    # image 0: beak at (100, 100); clean peak on it, noisy peak moved away -> changed
    parts = _parts([{BEAK: (100, 100)}, {BEAK: (100, 100)}])
    labels = torch.zeros(2, dtype=torch.int64)
    clean = _one_hot_224([[(100, 100)], [(100, 100)]])
    noisy = _one_hot_224([[(200, 10)], [(110, 90)]])
    assert stability(clean, noisy, labels, parts, 1) == 50.0


def test_stability_class_without_images_is_left_out() -> None:
    o = _o([{BEAK}])
    assert stability_score(o, o, torch.tensor([0]), 3) == 100.0
    assert stability_score(torch.zeros(0, 1, P, dtype=torch.bool), torch.zeros(0, 1, P, dtype=torch.bool),
                           torch.zeros(0, dtype=torch.int64), 2) is None


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((100, 100), (100, 100), 1.0),  # same centre
        ((100, 100), (100, 136), 1 / 3),  # dx = 36: 36*72 / (2*72^2 - 36*72)
        ((100, 100), (100, 124), 1 / 2),  # dx = 24: 48*72 / (10368 - 3456)
        ((100, 100), (136, 136), 1 / 7),  # (36, 36): 1296 / (10368 - 1296)
        ((100, 100), (100, 172), 0.0),  # |dx| = 72: touching
        ((100, 100), (10, 100), 0.0),  # |dy| = 90
        ((0, 0), (0, 36), 1 / 3),  # unclipped: boxes [-36, 36] and [0, 72] on that axis
    ],
)
def test_iou_72_table(a: tuple[int, int], b: tuple[int, int], expected: float) -> None:
    assert math.isclose(float(iou_72(torch.tensor(a), torch.tensor(b))), expected, abs_tol=1e-15)
    assert math.isclose(float(iou_72(torch.tensor(b), torch.tensor(a))), expected, abs_tol=1e-15)


def test_distinctiveness_examples() -> None:
    one = [(100, 100), (100, 136), (200, 200)]  # IoUs 1/3, 0, 0 -> mean 1/9
    apart = [(0, 0), (0, 100), (100, 0)]
    assert math.isclose(distinctiveness_score(torch.tensor([one])), 100 * (1 - 1 / 9))
    score = distinctiveness_score(torch.tensor([one, apart]))
    assert math.isclose(score, 100 * (1 - (1 / 9) / 2)) and round(score, 2) == 94.44
    assert distinctiveness_score(torch.tensor([[(50, 60)] * 5])) == 0.0
    spread = [(0, 0), (0, 100), (0, 200), (100, 0), (100, 100)]
    assert distinctiveness_score(torch.tensor([spread])) == 100.0
    # end to end: bilinear 224 -> 224 is the identity, the argmax is the centre
    assert math.isclose(distinctiveness(_one_hot_224([one, apart])), 100 * (1 - 1 / 18))


def test_distinctiveness_undefined_for_single_prototype() -> None:
    assert distinctiveness_score(torch.tensor([[(5, 5)], [(9, 9)]])) is None
    assert distinctiveness(torch.randn(3, 1, 8, 8)) is None
    assert distinctiveness(torch.randn(3, 4, 8, 8), topk=1) is None


def test_accuracy() -> None:
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]])
    # predictions 1, 0, 0 (tie -> first) vs labels 1, 1, 0 -> 2/3
    assert math.isclose(accuracy(logits, torch.tensor([1, 1, 0])), 200 / 3)
    assert accuracy(logits, torch.tensor([1, 0, 0])) == 100.0
    with pytest.raises(ValueError, match="labels"):
        accuracy(logits, torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="logits"):
        accuracy(torch.zeros(3), torch.tensor([1, 0, 0]))
    with pytest.raises(ValueError, match="labels"):
        accuracy(logits, torch.tensor([1, 0, 2]))


def test_comprehensiveness_hand_example() -> None:
    maps = torch.zeros(2, 4, 224, 224)
    maps[0, 0, 0:10, 0:10] = 1.0  # normalised 1: 100 px
    maps[0, 1, 0:10, 10:20] = 0.7  # its own max: normalised 1: 100 px
    maps[0, 2, 0:10, 0:10] = 1.0
    maps[0, 2, 50:60, 50:60] = 0.5  # normalised 0.5 < 0.6: not selected
    maps[0, 2, 100, 100] = 0.6  # normalised exactly 0.6 >= 0.6: selected (1 px)
    maps[0, 3] = 3.0  # constant map: selects nothing
    masks = torch.zeros(2, 224, 224, dtype=torch.bool)
    masks[0, 0:10, 5:25] = True  # 200 px
    # image 0: pred = rows 0..9 x cols 0..19 (200 px) + pixel (100, 100); inter = 10*15 = 150,
    # union = 10*25 + 1 = 251 -> IoU 150/251. Image 1: constant maps, empty mask -> IoU 0.
    union = foreground_union(maps.double())
    assert int(union[0].sum()) == 201 and int(union[1].sum()) == 0
    assert math.isclose(comprehensiveness(maps, masks), 100 * (150 / 251) / 2)
    # raw intensities are thresholded > 200
    raw = masks.to(torch.uint8) * 255
    assert math.isclose(comprehensiveness(maps, raw), 100 * (150 / 251) / 2)


def test_mask_iou_empty_is_zero() -> None:
    empty = torch.zeros(1, 4, 4, dtype=torch.bool)
    assert mask_iou(empty, empty).tolist() == [0.0]
    full = torch.ones(1, 4, 4, dtype=torch.bool)
    assert mask_iou(full, full).tolist() == [1.0]


def test_segmentation_to_frame_crop_resize_threshold() -> None:
    seg = np.zeros((10, 10), dtype=np.uint8)
    seg[3, 4] = 255  # row 3, col 4 -> crop (box x1=2, y1=2) row 1, col 2 -> 2x2 block at rows 2-3, cols 4-5
    seg[4, 5] = 200  # not > 200
    out = segmentation_to_frame(seg, (2, 2, 6, 6), size=8)
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[2:4, 4:6] = True
    assert torch.equal(out, expected)
    # (H, W, C) numpy and (C, H, W) torch: the first channel is used
    rgb = np.stack([seg, np.full_like(seg, 255), np.zeros_like(seg)], axis=-1)
    assert torch.equal(segmentation_to_frame(rgb, (2, 2, 6, 6), size=8), expected)
    assert torch.equal(segmentation_to_frame(torch.from_numpy(rgb).permute(2, 0, 1), (2, 2, 6, 6), size=8), expected)


def test_segmentation_to_frame_pads_outside_image() -> None:
    seg = np.full((10, 10), 255, dtype=np.uint8)
    out = segmentation_to_frame(seg, (8, 8, 12, 12), size=4)  # only the top-left 2x2 lies in the image
    expected = torch.zeros(4, 4, dtype=torch.bool)
    expected[:2, :2] = True
    assert torch.equal(out, expected)


def test_comprehensiveness_rejects_bad_masks() -> None:
    with pytest.raises(ValueError, match="masks"):
        comprehensiveness(torch.zeros(2, 3, 8, 8), torch.zeros(2, 100, 100, dtype=torch.bool))
