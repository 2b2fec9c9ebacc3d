"""The model-randomisation sanity metric against its oracles: scipy.stats.spearmanr for the rank
correlation, skimage.metrics.structural_similarity (its defaults, data_range 1) for SSIM."""
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
    assert np.abs(scores.spearman.numpy() - rho).max() < 1e-12
    assert np.abs(scores.ssim.numpy() - ssim).max() < 1e-10
    assert abs(scores.score - 100 * np.mean(1 - np.fabs(rho))) < 1e-10


def test_unchanged_maps_score_0_and_independent_maps_score_near_100() -> None:
    g = torch.Generator().manual_seed(1)
    trained = torch.randn(40, 2, 8, 8, generator=g)
    same = sanity(trained, trained)
    assert same.score == pytest.approx(0.0, abs=1e-9) and torch.allclose(same.ssim, torch.ones(40, dtype=torch.float64))
    reversed_ = sanity(trained, -trained)  # a sign flip is no dependence on learning (|ρ|)
    assert reversed_.score == pytest.approx(0.0, abs=1e-9)
    independent = sanity(trained, torch.randn(40, 2, 8, 8, generator=g))
    assert independent.score > 85


def test_a_constant_map_leaves_rho_undefined_and_is_left_out_of_the_score() -> None:
    trained = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(2))
    randomised = trained.clone()
    randomised[1] = 0.0
    scores = sanity(trained, randomised)
    assert torch.isnan(scores.spearman[1]) and scores.score == pytest.approx(0.0, abs=1e-9)
    assert sanity(trained, torch.zeros_like(trained)).score is None
    with pytest.raises(ValueError, match="randomised maps"):
        sanity(trained, trained[:, :, :3])
