"""Known answers of the metrics beyond the paper: purity, loc, size_local/size_global, del.

Every case is small enough to compute by hand; maps are given on the 224 frame itself, where
upsampling is the identity, so peaks and masses sit exactly where the test puts them."""
from __future__ import annotations

import math

import pytest
import torch

from metrics import FRAME_SIZE, PartGroundTruth
from metrics.deletion import deletion, deletion_masks
from metrics.localisation import localisation, localisation_shares
from metrics.purity import prototype_purities, purity
from metrics.size import local_sizes, size_global, size_local

S = FRAME_SIZE


def one_hot_maps(peaks: list[list[tuple[int, int, float]]]) -> torch.Tensor:
    """(N, J, 224, 224) zero maps with value v at (row, col) for each (row, col, v)."""
    maps = torch.zeros(len(peaks), len(peaks[0]), S, S, dtype=torch.float64)
    for i, row in enumerate(peaks):
        for j, (r, c, v) in enumerate(row):
            maps[i, j, r, c] = v
    return maps


def parts_of(xy: list[list[tuple[int, int]]], visible: list[list[bool]]) -> PartGroundTruth:
    return PartGroundTruth(torch.tensor(xy, dtype=torch.int64), torch.tensor(visible))


def test_upsampling_of_a_frame_sized_map_is_the_identity():
    from metrics.maps import upsample_maps

    x = torch.rand(1, 1, S, S, dtype=torch.float64)
    for mode in ("bicubic", "bilinear"):
        assert torch.allclose(upsample_maps(x, mode=mode), x, atol=1e-12)


def test_purity_known_answer():
    # class 0 has images 0, 1, 2; class 1 has none (its purities are NaN and not averaged).
    # prototype 0 peaks: image 0 (5.0 at 100,100), image 1 (3.0), image 2 (4.0 at 50,50) -> top-2 = {0, 2}
    # prototype 1 peaks: image 0 (1.0 at 100,116), image 1 (2.0 at 10,10), image 2 (0.5) -> top-2 = {1, 0}
    maps = one_hot_maps([
        [(100, 100, 5.0), (100, 116, 1.0)],
        [(150, 150, 3.0), (10, 10, 2.0)],
        [(50, 50, 4.0), (200, 200, 0.5)],
    ])
    # parts (x=col, y=row): part 0, part 1
    parts = parts_of(
        [[(105, 100), (0, 0)],      # image 0: part 0 5 px right of the peak of p0, 11 px left of p1's
         [(26, 10), (10, 27)],      # image 1: part 0 at col distance 16 (inside, inclusive), part 1 at 17 (out)
         [(200, 60), (55, 45)]],    # image 2: part 0 far from (50,50), part 1 inside
        [[True, False], [True, True], [True, True]],
    )
    values = prototype_purities(maps, torch.tensor([0, 0, 0]), parts, num_classes=2, topk=2)
    # p0: patches of images 0 and 2 -> part 0 in 1 of 2, part 1 in 1 of 2 -> 0.5
    # p1: patches of images 1 and 0 -> part 0 in both -> 1.0
    assert values[0].tolist() == [0.5, 1.0]
    assert bool(torch.isnan(values[1]).all())
    assert purity(maps, torch.tensor([0, 0, 0]), parts, num_classes=2, topk=2) == pytest.approx(75.0)


def test_purity_takes_all_images_of_a_small_class_and_ignores_invisible_parts():
    maps = one_hot_maps([[(20, 20, 1.0)], [(30, 30, 1.0)]])
    parts = parts_of([[(20, 20)], [(30, 30)]], [[True], [False]])
    # top-10 of a 2-image class = both; the part is visible in one of the two patches
    assert purity(maps, torch.tensor([0, 0]), parts, num_classes=1) == pytest.approx(50.0)


def test_localisation_known_answer():
    mask = torch.zeros(1, S, S, dtype=torch.bool)
    mask[:, :, : S // 2] = True  # the left half is the object
    maps = torch.zeros(1, 3, S, S, dtype=torch.float64)
    maps[0, 0, 10, 10] = 1.0  # one unit inside ...
    maps[0, 0, 10, 200] = 1.0  # ... one outside: 1/2
    maps[0, 1] = -1.0
    maps[0, 1, 5, 5] = 1.0  # min-shifted: 2 inside, 0 elsewhere: 1
    maps[0, 2] = 0.7  # constant: uniform mass, the object's area: 1/2
    shares = localisation_shares(maps, mask)
    assert shares.tolist() == [[0.5, 1.0, 0.5]]
    assert localisation(maps, mask) == pytest.approx(100 * 2 / 3)


def test_localisation_is_invariant_to_offset_and_positive_scale():
    maps = torch.rand(2, 2, 7, 7, dtype=torch.float64)
    masks = torch.rand(2, S, S) > 0.5
    assert torch.allclose(localisation_shares(maps, masks), localisation_shares(3 * maps - 5, masks))


def test_explanation_sizes_known_answer():
    contributions = torch.tensor([[3.0, 0.3, 0.2], [-1.0, -2.0, -3.0], [1.0, 0.0, 0.05]])
    # τ = 0.1: row 0 keeps 3 and 0.3 (0.2 < 0.3); row 1 has no positive contribution; row 2 keeps
    # only 1 (0.0 and 0.05 are below 0.1 · 1)
    assert local_sizes(contributions).tolist() == [2, 0, 1]
    assert size_local(contributions) == pytest.approx(1.0)
    # labels: class 0 = rows 0, 2 -> prototypes {0, 1, 2} ∪ {0, 2} = 3; class 1 = row 1 -> 3; class 2: no images
    assert size_global(contributions, torch.tensor([0, 1, 0]), num_classes=3) == 6
    contributions[0, 1] = 0.0  # prototype 1 of class 0 now contributes on no image of its class
    assert size_global(contributions, torch.tensor([0, 1, 0]), num_classes=3) == 5


def test_deletion_masks_pick_the_top_prototypes_and_random_ones_from_the_seed():
    contributions = torch.tensor([[1.0, 3.0, 2.0], [2.0, 2.0, 1.0]])
    top, rand = deletion_masks(contributions, 1, torch.Generator().manual_seed(0))
    assert top.tolist() == [[False, True, False], [True, False, False]]  # a tie goes to the lower index
    assert rand.sum(dim=1).tolist() == [1, 1]
    _, again = deletion_masks(contributions, 1, torch.Generator().manual_seed(0))
    assert torch.equal(rand, again)
    top2, rand_all = deletion_masks(contributions, 3, torch.Generator().manual_seed(0))
    assert bool(top2.all()) and bool(rand_all.all())
    with pytest.raises(ValueError, match="k: 4 exceeds"):
        deletion_masks(contributions, 4, torch.Generator())


def test_deletion_known_answer():
    labels = torch.tensor([0, 1])
    logits = torch.tensor([[5.0, 1.0], [0.0, 4.0]])
    top = torch.tensor([[0.5, 1.0], [0.0, 4.0]])  # image 0 now wrong (drop 4.5), image 1 unchanged (drop 0)
    rand = torch.tensor([[4.0, 1.0], [0.0, 3.0]])  # both still right (drops 1 and 1)
    result = deletion(logits, top, rand, labels)
    assert result["del"] == pytest.approx(100.0 - 50.0)
    assert result["del_logit_drop_top"] == pytest.approx(2.25)
    assert result["del_logit_drop_random"] == pytest.approx(1.0)
    assert math.isclose(deletion(logits, logits, logits, labels)["del"], 0.0)
