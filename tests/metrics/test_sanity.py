"""The model-randomisation sanity metric against its oracles: Quantus's ``MPRT`` (its default
normalisation, absolute value and Spearman similarity, as its ``explain_batch`` and ``__call__``
apply them) for ``sanity``, scipy.stats.spearmanr for the signed rank correlation,
skimage.metrics.structural_similarity (its defaults, data_range 1) for SSIM."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from skimage.metrics import structural_similarity

from metrics.sanity import sanity


def _unit(image: np.ndarray) -> np.ndarray:
    span = image.max() - image.min()
    return (image - image.min()) / span if span > 0 else np.zeros_like(image)


@pytest.mark.parametrize("grid", [(16, 16), (5, 6)])
def test_spearman_and_ssim_equal_scipy_and_skimage(grid) -> None:
    g = torch.Generator().manual_seed(0)
    trained = torch.randn(5, 3, *grid, generator=g, dtype=torch.float64)
    randomised = 0.5 * trained + torch.randn(5, 3, *grid, generator=g, dtype=torch.float64)
    randomised[0] = trained[0].round(decimals=0)  # ties: average ranks
    scores = sanity(trained, randomised)
    rho = np.array([spearmanr(t.flatten().numpy(), r.flatten().numpy()).statistic
                    for t, r in zip(trained, randomised)])
    ssim = np.array([np.mean([structural_similarity(_unit(t[j].numpy()), _unit(r[j].numpy()), data_range=1.0,
                                                    win_size=min(7, *grid) - (1 - min(7, *grid) % 2))
                              for j in range(3)]) for t, r in zip(trained, randomised)])
    assert np.abs(scores.spearman_signed.numpy() - rho).max() < 1e-12
    assert np.abs(scores.ssim.numpy() - ssim).max() < 1e-10
    assert abs(scores.score_signed - 100 * np.mean(1 - rho)) < 1e-10


def _quantus_mprt_similarity(trained: torch.Tensor, randomised: torch.Tensor) -> np.ndarray:
    """Per image, the similarity ``quantus.MPRT()`` computes between the original and the randomised
    model's explanations: each batch through the metric's ``normalise_func`` (if ``normalise``) and
    ``np.abs`` (if ``abs``), as ``Metric.explain_batch`` does, then ``similarity_func(..., batched=True)``
    on the flattened batches, as ``MPRT.__call__`` does."""
    import quantus  # the MPRT oracle (test extra); imported here so only this test needs it

    metric = quantus.MPRT(disable_warnings=True)
    assert metric.normalise and metric.abs  # the defaults the issue names

    def prepared(maps: torch.Tensor) -> np.ndarray:
        return np.abs(metric.normalise_func(maps.numpy()))

    a, b = prepared(trained), prepared(randomised)
    return metric.similarity_func(a.reshape(len(a), -1), b.reshape(len(b), -1), batched=True)


def test_sanity_equals_quantus_mprt_similarity_on_identical_maps() -> None:
    """Signed maps, 5 of 40 sign-reversed by the randomisation: ``sanity`` is 100 · mean(1 − ρ) with ρ
    Quantus's MPRT similarity; the signed reading differs by 9.7 points."""
    g = torch.Generator().manual_seed(55)
    trained = torch.randn(40, 3, 7, 7, generator=g, dtype=torch.float64)
    randomised = trained + 0.8 * torch.randn(40, 3, 7, 7, generator=g, dtype=torch.float64)
    randomised[:5] = -randomised[:5]
    scores = sanity(trained, randomised)
    oracle = _quantus_mprt_similarity(trained, randomised)
    assert np.abs(scores.spearman.numpy() - oracle).max() < 1e-12
    assert abs(scores.score - 100 * np.mean(1 - oracle)) < 1e-10
    assert abs(scores.score_signed - scores.score) > 5  # 9.7 points here
    non_negative = sanity(trained.abs(), randomised.abs())  # non-negative maps: the two readings agree
    assert abs(non_negative.score - non_negative.score_signed) < 1e-10


def test_unchanged_maps_score_0_and_independent_maps_score_near_100() -> None:
    g = torch.Generator().manual_seed(1)
    trained = torch.randn(40, 2, 8, 8, generator=g)
    same = sanity(trained, trained)
    assert same.score == pytest.approx(0.0, abs=1e-9) and torch.allclose(same.ssim, torch.ones(40, dtype=torch.float64))
    reversed_ = sanity(trained, -trained)  # a sign flip leaves the absolute maps unchanged
    assert reversed_.score == pytest.approx(0.0, abs=1e-9) and reversed_.score_signed == pytest.approx(200.0)
    independent = sanity(trained, torch.randn(40, 2, 8, 8, generator=g))
    assert independent.score > 85


def test_a_constant_map_leaves_rho_undefined_and_is_left_out_of_the_score() -> None:
    trained = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(2))
    randomised = trained.clone()
    randomised[1] = 0.0
    scores = sanity(trained, randomised)
    assert torch.isnan(scores.spearman[1]) and scores.score == pytest.approx(0.0, abs=1e-9)
    assert torch.isnan(scores.spearman_signed[1]) and scores.score_signed == pytest.approx(0.0, abs=1e-9)
    assert sanity(trained, torch.zeros_like(trained)).score is None
    assert sanity(trained, torch.zeros_like(trained)).score_signed is None
    flipped = trained.clone()  # ±1 everywhere: constant once absolute, so left out of sanity only
    flipped[2] = torch.where(torch.arange(16).view(1, 4, 4) % 2 == 0, 1.0, -1.0)
    both = sanity(trained, flipped)
    assert torch.isnan(both.spearman[2]) and not torch.isnan(both.spearman_signed[2])
    with pytest.raises(ValueError, match="randomised maps"):
        sanity(trained, trained[:, :, :3])
