"""The statistics of ``report --ci`` and ``compare``: intervals, paired tests, Holm correction.

Every number comes from scipy or statsmodels; this module only arranges the data (docs/guides/statistics.md
states each test and its assumptions):

- :func:`seed_interval`: Student t interval of a mean over n ≥ 2 seeds (``scipy.stats.t``);
- :func:`image_interval`: accuracy over test images, a percentile bootstrap that resamples
  the images of each seed independently (stratified; ``scipy.stats.bootstrap`` with one sample
  per seed), the statistic being the mean over seeds of the accuracy;
- :func:`paired_image_difference`: the difference of two accuracies on the same test images:
  percentile bootstrap resampling image indices (the same for both and for every seed), and
  McNemar's test on the (seed, image) pairs (``statsmodels``: exact binomial below 25
  discordant pairs, else χ² with continuity correction);
- :func:`paired_seed_difference`: the difference of a metric over seeds paired by seed:
  Student t interval of the paired differences and Wilcoxon's signed-rank test (exact);
- :func:`probability_of_improvement`: P(X > Y) + ½ P(X = Y) over all pairs of runs, the
  normalised Mann–Whitney U (Agarwal et al. 2021, "rliable");
- :func:`holm`: Holm's step-down adjustment (``statsmodels.stats.multitest.multipletests``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

N_RESAMPLES = 9999  # bootstrap resamples (scipy's default)
BOOTSTRAP_SEED = 0  # resampling is reproducible: one table, one set of intervals
EXACT_MCNEMAR_BELOW = 25  # discordant pairs; statsmodels' docs: exact binomial for small counts

SEED_METHOD = "Student t interval over seeds"
IMAGE_METHOD = f"percentile bootstrap over test images resampled within each seed ({N_RESAMPLES} resamples)"

Interval = tuple[float, float]


def seed_interval(values: Sequence[float], level: float) -> Interval | None:
    """The ``level`` Student t interval of the mean of ``values`` (one per seed); None for n < 2."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return None
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])  # zero spread: scipy would return NaN
    low, high = stats.t.interval(level, df=len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    return float(low), float(high)


def image_interval(correct_per_seed: Sequence[np.ndarray], level: float) -> Interval:
    """Percentile bootstrap interval (percent) of the mean over seeds of the accuracy, each
    seed's test images resampled independently (``correct_per_seed``: one 0/1 array per seed)."""
    samples = tuple(np.asarray(c, dtype=np.float64) for c in correct_per_seed)

    def mean_accuracy(*per_seed: np.ndarray, axis: int = -1) -> np.ndarray:
        return 100.0 * np.mean([s.mean(axis=axis) for s in per_seed], axis=0)

    result = stats.bootstrap(samples, mean_accuracy, confidence_level=level, n_resamples=N_RESAMPLES,
                             method="percentile", vectorized=True, random_state=BOOTSTRAP_SEED)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@dataclass(frozen=True)
class Difference:
    """One paired comparison: ``a − b`` with its interval and two-sided p-value (NaN where n
    is too small to give one), and the test that produced them."""

    difference: float
    ci: Interval
    p_value: float
    test: str


def paired_image_difference(a_correct: np.ndarray, b_correct: np.ndarray, level: float) -> Difference:
    """Accuracy of ``a`` minus that of ``b`` (percent) on the same images: (seeds, images)
    0/1 arrays paired by row (seed) and column (image). The bootstrap resamples images, each
    with its differences on every seed (an image is one unit however many seeds see it)."""
    a = np.asarray(a_correct, dtype=np.float64)
    b = np.asarray(b_correct, dtype=np.float64)

    per_image = 100.0 * (a - b).mean(axis=0)  # each image's difference, averaged over the seeds
    difference = float(per_image.mean())
    if np.all(per_image == per_image[0]):
        ci = (difference, difference)  # every resample gives the same: scipy warns on a degenerate distribution
    else:
        res = stats.bootstrap((per_image,), np.mean, confidence_level=level, n_resamples=N_RESAMPLES,
                              method="percentile", vectorized=True, random_state=BOOTSTRAP_SEED)
        ci = (float(res.confidence_interval.low), float(res.confidence_interval.high))
    return Difference(difference, ci, mcnemar_p(a.ravel() > 0, b.ravel() > 0), "McNemar")


def mcnemar_p(a_correct: np.ndarray, b_correct: np.ndarray) -> float:
    """McNemar's two-sided p-value for paired correctness (statsmodels); 1 without discordant pairs."""
    from statsmodels.stats.contingency_tables import mcnemar

    a, b = np.asarray(a_correct, dtype=bool), np.asarray(b_correct, dtype=bool)
    table = [[int(np.sum(a & b)), int(np.sum(a & ~b))], [int(np.sum(~a & b)), int(np.sum(~a & ~b))]]
    discordant = table[0][1] + table[1][0]
    if discordant == 0:
        return 1.0
    exact = discordant < EXACT_MCNEMAR_BELOW
    return float(mcnemar(table, exact=exact, correction=not exact).pvalue)


def paired_seed_difference(a: Sequence[float], b: Sequence[float], level: float) -> Difference:
    """Mean of ``a − b`` over seeds (paired by position), its Student t interval, and the exact
    Wilcoxon signed-rank p-value (1 when every difference is 0; NaN interval for n < 2)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    ci = seed_interval(d, level) or (math.nan, math.nan)
    if len(d) == 0:
        return Difference(math.nan, ci, math.nan, "Wilcoxon signed-rank")
    p = 1.0 if np.all(d == 0) else float(stats.wilcoxon(d, method="exact" if np.all(d != 0) else "auto").pvalue)
    return Difference(float(d.mean()), ci, p, "Wilcoxon signed-rank")


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float:
    """P(A > B) + ½ P(A = B) over all pairs of a run of ``a`` and one of ``b``: U / (n·m)."""
    if len(a) == 0 or len(b) == 0:
        return math.nan
    u = stats.mannwhitneyu(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)).statistic
    return float(u) / (len(a) * len(b))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (statsmodels); NaN entries stay NaN and do not count."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p_values, dtype=np.float64)
    out = np.full_like(p, math.nan)
    finite = ~np.isnan(p)
    if finite.any():
        out[finite] = multipletests(p[finite], method="holm")[1]
    return out.tolist()
