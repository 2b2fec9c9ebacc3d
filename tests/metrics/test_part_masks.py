"""metrics.part_masks: polygons into the 224 frame (against a PNPOLY loop), which masks lie under a
peak (against a loop over the region's pixels), and consistency, stability and purity on masks equal
to their keypoint values when each mask is the one pixel its keypoint falls on
(docs/protocol/metrics.md "Parts given as masks")."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from metrics import (FRAME_SIZE, PartGroundTruth, PartMasks, consistency, explanation_records, mask_part_vectors,
                     pack_part_masks, part_vectors, polygons_to_frame, region_bounds, stability)
from metrics.part_masks import polygon_to_frame
from metrics.purity import prototype_purities


def pnpoly_oracle(vertices: np.ndarray, width: int, height: int, size: int) -> np.ndarray:
    """W. R. Franklin's PNPOLY, one pixel centre at a time, on the polygon scaled with the image."""
    xs = [float(x) * size / width for x in vertices[:, 0]]
    ys = [float(y) * size / height for y in vertices[:, 1]]
    out = np.zeros((size, size), dtype=bool)
    for row in range(size):
        for col in range(size):
            px, py = col + 0.5, row + 0.5
            inside = False
            j = len(xs) - 1
            for i in range(len(xs)):
                if (ys[i] > py) != (ys[j] > py) and px < (xs[j] - xs[i]) * (py - ys[i]) / (ys[j] - ys[i]) + xs[i]:
                    inside = not inside
                j = i
            out[row, col] = inside
    return out


@pytest.mark.parametrize("seed", range(6))
def test_polygon_rasterisation_equals_the_pnpoly_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    width, height = int(rng.integers(20, 90)), int(rng.integers(20, 90))
    vertices = np.stack([rng.uniform(0, width, 9), rng.uniform(0, height, 9)], axis=1)  # concave, self-crossing
    if seed % 2:  # vertices on pixel edges and centres: the rule's ties
        vertices = np.round(vertices * 2) / 2
    size = 24
    assert np.array_equal(polygon_to_frame(vertices, width, height, size), pnpoly_oracle(vertices, width, height, size))


def test_an_axis_aligned_rectangle_selects_the_centres_inside_it() -> None:
    # [2, 5) × [1, 3) in a 10 × 10 image at size 10: columns 2, 3, 4 of rows 1, 2 (edges left/top in, right/bottom out)
    mask = polygon_to_frame(np.array([[2, 1], [5, 1], [5, 3], [2, 3]]), 10, 10, 10)
    assert sorted(zip(*np.nonzero(mask))) == [(1, 2), (1, 3), (1, 4), (2, 2), (2, 3), (2, 4)]
    # scaled with the image: the 20 × 10 image's [4, 10) × [1, 3) is the same rectangle at size 10
    assert np.array_equal(polygon_to_frame(np.array([[4, 1], [10, 1], [10, 3], [4, 3]]), 20, 10, 10), mask)
    # a whole-image rectangle fills the frame; polygons of a part are united
    assert polygon_to_frame(np.array([[0, 0], [7, 0], [7, 5], [0, 5]]), 7, 5, FRAME_SIZE).all()
    two = polygons_to_frame([np.array([[0, 0], [1, 0], [1, 1], [0, 1]]), np.array([[9, 9], [10, 9], [10, 10], [9, 10]])],
                            10, 10, 10)
    assert sorted(zip(*np.nonzero(two))) == [(0, 0), (9, 9)]


def test_a_degenerate_polygon_is_refused() -> None:
    with pytest.raises(ValueError, match="V >= 3"):
        polygon_to_frame(np.array([[0, 0], [1, 1]]), 10, 10)


def _random_masks(rng: np.random.Generator, n: int, parts: int, size: int) -> list[dict[int, np.ndarray]]:
    images = []
    for _ in range(n):
        chosen = rng.choice(parts, size=int(rng.integers(0, min(parts, 8) + 1)), replace=False)
        masks = {}
        for p in chosen:
            mask = np.zeros((size, size), dtype=bool)
            r, c = rng.integers(0, size, 2)
            h, w = rng.integers(1, 12, 2)
            mask[r:r + h, c:c + w] = True
            if rng.random() < 0.2:
                mask[:] = False  # a part listed with an empty mask: not visible
            masks[int(p)] = mask
        images.append(masks)
    return images


def test_mask_part_vectors_equal_a_loop_over_each_regions_pixels() -> None:
    rng = np.random.default_rng(0)
    n, j, parts, size = 7, 3, 11, 64
    images = _random_masks(rng, n, parts, size)
    masks = pack_part_masks(images, parts, size)
    centres = torch.as_tensor(rng.integers(0, size, (n, j, 2)))
    o = mask_part_vectors(centres, masks, half_size=9, size=size)
    bounds = region_bounds(centres, 9, size)
    for i in range(n):
        for k in range(j):
            r1, r2, c1, c2 = bounds[i, k].tolist()
            for p in range(parts):
                expected = p in images[i] and bool(images[i][p][r1:r2 + 1, c1:c2 + 1].any())
                assert bool(o[i, k, p]) == expected, (i, k, p)
    visible = masks.visible
    assert visible.tolist() == [[p in im and bool(im[p].any()) for p in range(parts)] for im in images]
    assert bool((o <= visible[:, None, :]).all())  # o implies m
    union = np.stack([np.any([m for m in im.values()], axis=0) if im else np.zeros((size, size), bool) for im in images])
    assert np.array_equal(masks.foreground().numpy(), union)


def test_part_masks_refuse_what_they_cannot_hold() -> None:
    full = np.ones((4, 4), dtype=bool)
    with pytest.raises(ValueError, match="at most 8"):
        pack_part_masks([{p: full for p in range(9)}], 9, 4)
    with pytest.raises(ValueError, match=r"part 3 outside \[0, 3\)"):
        pack_part_masks([{3: full}], 3, 4)
    masks = pack_part_masks([{0: full, 2: full}], 3, 4)
    with pytest.raises(ValueError, match="two slots"):
        PartMasks(masks.bits, torch.tensor([[0, 0, -1, -1, -1, -1, -1, -1]]), 3)
    with pytest.raises(ValueError, match="unused slot"):
        PartMasks(masks.bits | 4, masks.slot_parts, 3)
    with pytest.raises(ValueError, match="frame is"):
        mask_part_vectors(torch.zeros((1, 1, 2), dtype=torch.int64), masks, size=FRAME_SIZE)


def _keypoints_and_their_pixels(rng: np.random.Generator, n: int, parts: int) -> tuple[PartGroundTruth, PartMasks]:
    """Keypoints inside the frame and, for each visible one, the mask of the one pixel it falls on."""
    px = torch.as_tensor(rng.integers(0, FRAME_SIZE, (n, parts, 2)))
    visible = torch.as_tensor(rng.random((n, parts)) < 0.7)
    images = []
    for i in range(n):
        masks = {}
        for p in range(parts):
            if visible[i, p]:
                mask = np.zeros((FRAME_SIZE, FRAME_SIZE), dtype=bool)
                mask[int(px[i, p, 1]), int(px[i, p, 0])] = True  # (x, y) = (col, row)
                masks[p] = mask
        images.append(masks)
    return PartGroundTruth(px, visible), pack_part_masks(images, parts)


def test_masks_of_the_keypoints_pixels_give_the_keypoint_scores_exactly() -> None:
    """The issue's check: consistency and stability on masks equal the keypoint version when each
    mask is the keypoint's box (the one pixel it falls on), on maps whose peaks land near the parts."""
    rng = np.random.default_rng(3)
    n, j, parts, classes = 24, 3, 8, 4
    keypoints, masks = _keypoints_and_their_pixels(rng, n, parts)
    labels = torch.as_tensor(np.repeat(np.arange(classes), n // classes))
    clean = torch.as_tensor(rng.normal(size=(n, j, 16, 16)))
    noisy = clean + torch.as_tensor(rng.normal(scale=0.3, size=clean.shape))
    centres = torch.as_tensor(rng.integers(0, FRAME_SIZE, (n, j, 2)))
    assert torch.equal(part_vectors(centres, keypoints), mask_part_vectors(centres, masks))
    assert torch.equal(keypoints.visible, masks.visible)
    for threshold in (0.8, 0.3):
        assert consistency(clean, labels, keypoints, classes, threshold=threshold) == \
            consistency(clean, labels, masks, classes, threshold=threshold)
    by_keypoints = stability(clean, noisy, labels, keypoints, classes)
    assert by_keypoints == stability(clean, noisy, labels, masks, classes) and 0 < by_keypoints < 100
    a = explanation_records(clean, noisy, labels, keypoints, classes)
    b = explanation_records(clean, noisy, labels, masks, classes)
    assert a.scores == b.scores
    for key in ("con", "sta"):
        assert torch.equal(a.per_prototype[key].nan_to_num(-1), b.per_prototype[key].nan_to_num(-1))
    assert torch.equal(prototype_purities(clean, labels, keypoints, classes, topk=3).nan_to_num(-1),
                       prototype_purities(clean, labels, masks, classes, topk=3).nan_to_num(-1))


def test_a_larger_mask_can_only_add_hits() -> None:
    """Growing each pixel to its 5 × 5 neighbourhood keeps every keypoint hit and adds the peaks
    within two pixels of the region: a peak 38 rows below a keypoint misses it (36 is the reach)
    but meets the grown mask."""
    rng = np.random.default_rng(5)
    keypoints, masks = _keypoints_and_their_pixels(rng, 6, 4)
    grown = torch.nn.functional.max_pool2d(masks.planes().float(), 5, stride=1, padding=2).bool()
    bigger = PartMasks(sum((grown[:, k].to(torch.uint8) << k) for k in range(8)).to(torch.uint8), masks.slot_parts, 4)
    centres = torch.as_tensor(rng.integers(0, FRAME_SIZE, (6, 5, 2)))
    part = int(torch.nonzero(keypoints.visible[0])[0, 0])
    x, y = keypoints.part_px[0, part].tolist()
    centres[0, 0] = torch.tensor([y + 38 if y + 38 < FRAME_SIZE else y - 38, x])
    small, large = part_vectors(centres, keypoints), mask_part_vectors(centres, bigger)
    assert bool((small <= large).all())
    assert not small[0, 0, part] and large[0, 0, part]
