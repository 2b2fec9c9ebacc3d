"""Accuracy comparisons clustered on test images (issue 29 item 1): with no true difference and
seeds evaluated on the same images, the suite's test keeps its false-positive rate at α, where
McNemar on the pooled (seed, image) pairs does not.

The simulation (fixed seed, 2,000 comparisons of two methods, 4 seeds, 100 test images): image i
has a difficulty z_i shared by both methods and every seed, and each method m its own effect u_mi
on the image, shared by its seeds (what a method happens to get right on that image); seed s of
method m answers image i correctly with probability expit(0.8 + z_i + u_mi). The methods are
exchangeable, so their accuracies over the image population are equal. Per-image correctness
then correlates ~0.27 across seeds (0.32 on the demo), so the 4 × 100 (seed, image) pairs are not
400 independent pairs, and pooled McNemar rejects the true null too often.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit
from statsmodels.stats.contingency_tables import mcnemar

from reports.stats import paired_image_difference

COMPARISONS, SEEDS, IMAGES, ALPHA = 2000, 4, 100, 0.05


def simulated_null(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(comparisons, seeds, images) 0/1 correctness of two equally good methods."""
    difficulty = rng.normal(0.0, 0.7, (COMPARISONS, 1, IMAGES))
    own_a, own_b = (rng.normal(0.0, 1.3, (COMPARISONS, 1, IMAGES)) for _ in range(2))
    a = rng.random((COMPARISONS, SEEDS, IMAGES)) < expit(0.8 + difficulty + own_a)
    b = rng.random((COMPARISONS, SEEDS, IMAGES)) < expit(0.8 + difficulty + own_b)
    return a, b


def pooled_mcnemar_p(a: np.ndarray, b: np.ndarray) -> float:
    """McNemar on the pooled (seed, image) pairs (statsmodels; exact below 25 discordant pairs,
    else χ² with continuity correction): the procedure ``compare`` used before issue 29."""
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    exact = only_a + only_b < 25
    return float(mcnemar([[0, only_a], [only_b, 0]], exact=exact, correction=not exact).pvalue)


def test_image_clustered_test_holds_alpha_where_pooled_mcnemar_does_not() -> None:
    a, b = simulated_null(np.random.default_rng(29))
    first = a[:, 0].astype(float)
    second = a[:, 1].astype(float)
    across_seeds = np.mean([np.corrcoef(x, y)[0, 1] for x, y in zip(first[:300], second[:300])])
    assert 0.2 < across_seeds < 0.4  # seeds share their images' difficulty and the method's own effects
    ours = np.array([paired_image_difference(x, y, 1 - ALPHA).p_value for x, y in zip(a, b)])
    pooled = np.array([pooled_mcnemar_p(x, y) for x, y in zip(a, b)])
    assert 0.03 <= np.mean(ours < ALPHA) <= 0.07
    assert np.mean(pooled < ALPHA) > 0.07
