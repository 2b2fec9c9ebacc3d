"""The QPM line's metrics (class_indep, contrastive, sid5) against re-statements of DINO-QPM's official
code (tests/helpers/dinoqpm_oracle.py), and PF-CBM's pointing against a loop oracle of its stated
definition (docs/protocol/metrics.md)."""
from statistics import NormalDist

import numpy as np
import pytest
import torch

from dinoqpm_oracle import (
    official_class_independence,
    official_contrastiveness,
    official_sid,
    pointing_by_loops,
)
from metrics import PartGroundTruth, peak_positions
from metrics.global_interpretability import class_independence, contrastiveness, normal_overlap, sid_k
from metrics.pointing import POINTING_RADIUS, pointing


def features_and_labels(seed=0, n=90, k=9, classes=6):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    bumps = torch.rand(classes, k, generator=g) ** 4  # some features fire for few classes
    features = bumps[labels] + 0.05 * torch.randn(n, k, generator=g)
    return features, labels


def test_class_independence_equals_compute_real_gt_max():
    for seed in range(3):
        features, labels = features_and_labels(seed)
        ours = class_independence(features, labels, 6) / 100
        official = official_class_independence(features.float(), 6, labels)
        assert abs(ours - official) < 1e-6


def test_class_independence_of_one_class_features_is_zero_and_of_shared_ones_high():
    labels = torch.arange(40) % 4
    one_class = torch.nn.functional.one_hot(labels, 4).double()
    assert class_independence(one_class, labels, 4) == pytest.approx(0.0, abs=1e-12)
    shared = torch.rand(40, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1
    assert class_independence(shared, labels, 4) > 60


def test_normal_overlap_equals_statistics_normaldist():
    rng = np.random.default_rng(0)
    mu = rng.normal(size=(2, 300))
    sigma = rng.uniform(0.05, 3.0, size=(2, 300))
    sigma[1, :50] = sigma[0, :50]  # equal variances: the closed form's other branch
    ours = normal_overlap(mu[0], sigma[0], mu[1], sigma[1])
    expected = [NormalDist(a, b).overlap(NormalDist(c, d)) for a, b, c, d in zip(mu[0], sigma[0], mu[1], sigma[1])]
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12)


def test_contrastiveness_equals_gmm_overlap_per_feature():
    features, _ = features_and_labels(1)
    ours = contrastiveness(features) / 100
    official = official_contrastiveness(features.double().numpy(), random_state=0)
    assert abs(ours - official) < 1e-9


@pytest.mark.parametrize("value", [0.0, 0.25])
def test_a_constant_feature_is_scored_as_the_official_fit_scores_it(value):
    features, _ = features_and_labels(2)
    features[:, 3] = value  # a dead unit: overlap 1 at 0, about 0 elsewhere (the official fit's artefact)
    with pytest.warns(Warning):  # k-means inside the fit: one distinct value
        official = official_contrastiveness(features.double().numpy(), random_state=0)
    with pytest.warns(Warning):
        ours = contrastiveness(features) / 100
    assert abs(ours - official) < 1e-9


def test_contrastiveness_separates_binary_from_unimodal_features():
    g = torch.Generator().manual_seed(0)
    on_off = (torch.rand(200, 2, generator=g) > 0.5).double() * 5 + 0.01 * torch.randn(200, 2, generator=g,
                                                                                         dtype=torch.float64)
    unimodal = torch.randn(200, 2, generator=g, dtype=torch.float64)
    assert contrastiveness(on_off) > 95 > 60 > contrastiveness(unimodal)


def qpm_setting(seed=0, n=40, k=14, classes=5, per_class=5, side=7):
    g = torch.Generator().manual_seed(seed)
    weights = torch.zeros(classes, k)
    for c in range(classes):
        weights[c, torch.randperm(k, generator=g)[:per_class]] = 1.0
    maps = torch.randn(n, k, side, side, generator=g) * 3
    outputs = torch.randn(n, classes, generator=g)
    return weights, maps, outputs


def predicted_class_maps(weights, maps, outputs, per_class):
    index = weights[outputs.argmax(dim=1)].topk(per_class).indices
    return torch.gather(maps, 1, index[:, :, None, None].expand(-1, -1, *maps.shape[2:]))


def test_sid5_equals_multik_cross_channel_max_pooled_sum():
    for seed in range(3):
        weights, maps, outputs = qpm_setting(seed)
        chosen = predicted_class_maps(weights, maps, outputs, 5)
        ours, k = sid_k(chosen, torch.ones(len(chosen), 5))
        assert k == 5
        assert abs(ours / 100 - official_sid(outputs, maps, weights, 5)) < 1e-6


def test_sid_with_fewer_maps_than_k_falls_back_to_sid_at_j_and_ranks_by_contribution():
    weights, maps, outputs = qpm_setting(2, per_class=3)
    chosen = predicted_class_maps(weights, maps, outputs, 3)
    ours, k = sid_k(chosen, torch.ones(len(chosen), 3))
    assert k == 3 and abs(ours / 100 - official_sid(outputs, maps, weights, 3)) < 1e-6
    # k < J: the k largest contributions; the official top-k of the weights when they order the same way
    graded = weights * torch.linspace(2, 1, weights.shape[1])
    six = predicted_class_maps(graded, maps, outputs, 3)
    contributions = graded[outputs.argmax(dim=1)].gather(1, graded[outputs.argmax(dim=1)].topk(3).indices)
    two, k = sid_k(six, contributions, k=2)
    assert k == 2 and abs(two / 100 - official_sid(outputs, maps, graded, 2)) < 1e-6


def test_sid_of_spikes_on_separate_cells_and_of_flat_maps_by_hand():
    hot = torch.zeros(3, 5, 4, 4)
    for j in range(5):
        hot[:, j, j % 4, j // 4] = 1e4  # each map a spike on its own cell: 16 after ÷ mean|map| (1e4 / 16)
    on, off = np.exp(16) / (np.exp(16) + 15), 1 / (np.exp(16) + 15)  # softmax over the 16 cells
    assert sid_k(hot, torch.ones(3, 5))[0] == pytest.approx(100 * (5 * on + 11 * off) / 5, abs=1e-9)
    flat = torch.ones(3, 5, 4, 4)
    assert sid_k(flat, torch.ones(3, 5))[0] == pytest.approx(100.0 / 5, abs=1e-9)


def random_parts(n, parts, g):
    xy = torch.randint(0, 224, (n, parts, 2), generator=g)
    visible = torch.rand(n, parts, generator=g) > 0.2
    return PartGroundTruth(xy, visible)


def test_pointing_equals_its_loop_oracle():
    g = torch.Generator().manual_seed(0)
    classes, J, P, side = 3, 4, 6, 7
    for trial in range(3):
        train_maps = torch.randn(24, J, side, side, generator=g)
        maps = torch.randn(18, J, side, side, generator=g)
        train_labels, labels = torch.arange(24) % classes, torch.arange(18) % classes
        train_parts, parts = random_parts(24, P, g), random_parts(18, P, g)
        radius = POINTING_RADIUS * (1 + trial)  # wider radii: more hits, more assigned parts
        ours = pointing(maps, parts, labels, train_maps, train_parts, train_labels, classes, radius=radius)
        expected = pointing_by_loops(peak_positions(maps).numpy(), parts.part_px.numpy(), parts.visible.numpy(),
                                     labels.numpy(), peak_positions(train_maps).numpy(),
                                     train_parts.part_px.numpy(), train_parts.visible.numpy(),
                                     train_labels.numpy(), classes, radius)
        assert ours == pytest.approx(expected, abs=1e-12)


def test_pointing_is_full_when_every_peak_sits_on_one_part_and_zero_when_it_never_does():
    n, J, side = 8, 2, 14
    maps = torch.zeros(n, J, side, side)
    maps[:, 0, 3, 3] = 5.0  # peak at cell (3, 3): centre (56, 56) in the 224 frame
    maps[:, 1, 10, 10] = 5.0
    labels = torch.zeros(n, dtype=torch.long)
    peaks = peak_positions(maps)
    on = torch.stack([peaks[:, 0].flip(-1), peaks[:, 1].flip(-1), torch.full((n, 2), 223)], dim=1)
    parts = PartGroundTruth(on.long(), torch.ones(n, 3, dtype=torch.bool))
    assert pointing(maps, parts, labels, maps, parts, labels, 1) == pytest.approx(100.0)
    away = PartGroundTruth(torch.full((n, 3, 2), 223, dtype=torch.long), torch.ones(n, 3, dtype=torch.bool))
    assert pointing(maps, away, labels, maps, away, labels, 1) == pytest.approx(0.0)


@pytest.mark.parametrize("bad, message", [
    (torch.ones(5), "features: expected a floating tensor of shape (N, K)"),
    (torch.ones(1, 3), "features: needs at least 2 images"),
    (torch.tensor([[0.0, float("nan")], [1.0, 2.0]]), "features: contains NaN"),
])
def test_bad_features_are_refused_naming_them(bad, message):
    with pytest.raises(ValueError, match=None) as err:
        class_independence(bad, torch.zeros(bad.shape[0] if bad.dim() else 1, dtype=torch.long), 2)
    assert message in str(err.value)
    with pytest.raises(ValueError):
        contrastiveness(bad)


def test_sid_refuses_contributions_of_another_shape():
    with pytest.raises(ValueError, match="contributions: expected shape"):
        sid_k(torch.ones(3, 5, 2, 2), torch.ones(3, 4))
