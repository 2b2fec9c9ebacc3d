"""The statistics of ``report --ci``, ``compare`` and ``--significance``: intervals, paired tests,
Holm correction.

Every number comes from scipy or statsmodels; this module only arranges the data (docs/guides/statistics.md
states each procedure, its assumptions and the n it needs). Every interval comes
from the same procedure as its test, so an interval excludes 0 exactly when p < 1 − level:

- :func:`seed_interval`: Student t interval of a mean over n ≥ 2 seeds (``scipy.stats.t``);
- :func:`image_mean`: the mean over test images of one number per image, its Student t interval
  and one-sample t-test (``scipy.stats.ttest_1samp``); the image is the unit (the seeds see the
  same images, so their correctness is averaged within each image, never pooled as independent
  pairs), valid by the central limit theorem over images from :data:`MIN_IMAGES` images;
- :func:`image_accuracy`: a cell's accuracy over its seeds, by :func:`image_mean`;
- :func:`paired_image_difference`: ``a − b`` accuracy on the same images, by :func:`image_mean`
  of each image's difference averaged over the paired seeds;
- :func:`paired_seed_difference`: ``a − b`` of a metric paired by seed: paired Student t
  (``ttest_1samp`` of the differences = ``ttest_rel``) and its interval, n ≥ 2 seeds;
- :func:`wilcoxon_p`: Wilcoxon's signed-rank test (exact), for the critical-difference diagram;
- :func:`probability_of_improvement`: P(X > Y) + ½ P(X = Y) over all pairs of runs, the
  normalised Mann–Whitney U (Agarwal et al. 2021, "rliable");
- :func:`holm`: Holm's step-down adjustment (``statsmodels.stats.multitest.multipletests``).

Intervals are clipped to the range the quantity can take and say so (``clipped``).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_IMAGES = 30  # the image t-test's normal approximation of a mean of bounded values (docs/guides/statistics.md)
MIN_SEEDS = 2  # a t interval needs a spread: n − 1 ≥ 1 degrees of freedom

SEED_METHOD = "Student t interval over seeds"
IMAGE_METHOD = (f"Student t interval over test images (each image's correctness averaged over the seeds; "
                f"at least {MIN_IMAGES} images)")
IMAGE_TEST = "Student t over images"
SEED_TEST = "paired Student t over seeds"

Interval = tuple[float, float]
Bounds = tuple[float, float]
NO_INTERVAL: Interval = (math.nan, math.nan)


def clip_interval(interval: Interval, bounds: Bounds) -> tuple[Interval, bool]:
    """``interval`` clipped to ``bounds`` (the values the quantity can take), and whether it was."""
    low, high = max(interval[0], bounds[0]), min(interval[1], bounds[1])
    return (low, high), (low, high) != interval


def seed_interval(values: Sequence[float], level: float,
                  bounds: Bounds = (-math.inf, math.inf)) -> tuple[Interval, bool] | None:
    """The ``level`` Student t interval of the mean of ``values`` (one per seed), clipped to
    ``bounds``, and whether it was clipped; None for n < 2."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < MIN_SEEDS:
        return None
    if np.all(x == x[0]):
        return (float(x[0]), float(x[0])), False  # zero spread: scipy would return NaN
    low, high = stats.t.interval(level, df=len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    return clip_interval((float(low), float(high)), bounds)


@dataclass(frozen=True)
class Difference:
    """A mean with its interval (clipped to the quantity's range; ``clipped`` says so) and the
    two-sided p-value of "the mean is 0" from the same procedure, ``test``. Where n is too small
    for the test, ``p_value`` and ``ci`` are NaN and ``test`` says why."""

    difference: float
    ci: Interval
    p_value: float
    test: str
    clipped: bool = False

    @property
    def tested(self) -> bool:
        return not math.isnan(self.p_value)


def student_t(values: np.ndarray, level: float, bounds: Bounds, test: str) -> Difference:
    """One-sample Student t on ``values`` (H0: mean 0): ``scipy.stats.ttest_1samp`` and its
    ``confidence_interval(level)``, so the interval excludes 0 exactly when p < 1 − level. With
    zero spread scipy's t is ±∞ (p = 0, interval the point); all values 0 give 0/0, reported as
    p = 1 (nothing differs)."""
    x = np.asarray(values, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's precision-loss note on (near-)constant data
        result = stats.ttest_1samp(x, 0.0)
        low, high = result.confidence_interval(level)
    p = float(result.pvalue)
    if math.isnan(p) and np.all(x == 0):
        p = 1.0
    ci, clipped = clip_interval((float(low), float(high)), bounds)
    return Difference(float(x.mean()), ci, p, test, clipped)


def image_mean(per_image: np.ndarray, level: float, bounds: Bounds) -> Difference:
    """The mean over test images of ``per_image`` (one value per image, the seeds already
    averaged within it), with its Student t interval and test; no test below ``MIN_IMAGES``."""
    x = np.asarray(per_image, dtype=np.float64)
    if len(x) < MIN_IMAGES:
        return Difference(float(x.mean()) if len(x) else math.nan, NO_INTERVAL, math.nan,
                          f"{len(x)} images: no test (needs {MIN_IMAGES})")
    return student_t(x, level, bounds, IMAGE_TEST)


def image_accuracy(correct: np.ndarray, level: float) -> Difference:
    """A cell's accuracy (percent) on its test images: ``correct`` is (seeds, images) 0/1; each
    image's correctness is averaged over the seeds, then :func:`image_mean` over images."""
    per_image = 100.0 * np.asarray(correct, dtype=np.float64).mean(axis=0)
    return image_mean(per_image, level, (0.0, 100.0))


def paired_image_difference(a_correct: np.ndarray, b_correct: np.ndarray, level: float) -> Difference:
    """Accuracy of ``a`` minus that of ``b`` (percent) on the same images: (seeds, images) 0/1
    arrays paired by row (seed) and column (image); each image's difference is averaged over the
    seeds, then :func:`image_mean` over images (an image is one unit however many seeds see it)."""
    a = np.asarray(a_correct, dtype=np.float64)
    b = np.asarray(b_correct, dtype=np.float64)
    return image_mean(100.0 * (a - b).mean(axis=0), level, (-100.0, 100.0))


def paired_seed_difference(a: Sequence[float], b: Sequence[float], level: float,
                           bounds: Bounds = (-math.inf, math.inf)) -> Difference:
    """Mean of ``a − b`` over seeds (paired by position), its paired Student t interval (clipped
    to ``bounds``) and p-value (``ttest_1samp`` of the differences, = ``ttest_rel``); no test for
    n < 2."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) < MIN_SEEDS:
        return Difference(float(d.mean()) if len(d) else math.nan, NO_INTERVAL, math.nan,
                          f"n = {len(d)} seed: no test (needs {MIN_SEEDS})")
    return student_t(d, level, bounds, SEED_TEST)


def wilcoxon_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Wilcoxon's signed-rank two-sided p of ``a − b`` (exact without zero differences; 1 when
    every difference is 0): the pairwise test of the critical-difference diagram (``reports.cd``)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if np.all(d == 0):
        return 1.0
    return float(stats.wilcoxon(d, method="exact" if np.all(d != 0) else "auto").pvalue)


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
