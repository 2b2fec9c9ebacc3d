"""The statistics of ``report --ci``, ``compare`` and ``--significance``: intervals, paired tests,
Holm correction.

Every number comes from scipy or statsmodels, or from the crossed-design procedure assembled in
``reports.crossed`` out of scipy's distributions (tested against statsmodels' ANOVA and mixed
model); this module only arranges the data (docs/guides/statistics.md states each procedure, its
assumptions and the n it needs). Every interval comes from the same procedure as its test, so an
interval excludes 0 exactly when p < 1 − level:

- :func:`seed_interval`: Student t interval of a mean over n ≥ 2 seeds (``scipy.stats.t``);
- :func:`crossed_mean`: the mean of per-image values over seeds × test images (the seeds see the
  same images): the two-way random-effects interval and test of ``reports.crossed``; one seed:
  Student t over images, saying that training variance is not covered; few images where a
  difference is non-zero: the exact sign-flip test over images (``scipy.stats.permutation_test``);
- :func:`image_accuracy`: a cell's accuracy over its seeds and images, by :func:`crossed_mean`
  (Clopper–Pearson over images where every image is right, or wrong, on every seed);
- :func:`paired_image_difference`: ``a − b`` of a per-image value on the same seeds and images,
  by :func:`crossed_mean` of the differences;
- :func:`paired_seed_difference`: ``a − b`` of a metric without per-image values, paired by seed:
  paired Student t (``ttest_1samp`` of the differences = ``ttest_rel``), n ≥ 2 seeds; it covers
  training variance only;
- :func:`wilcoxon_p`: Wilcoxon's signed-rank test (exact), for the critical-difference diagram;
- :func:`probability_of_improvement`: P(X > Y) + ½ P(X = Y) over all pairs of runs, the
  normalised Mann–Whitney U (Agarwal et al. 2021, "rliable");
- :func:`holm`: Holm's step-down adjustment (``statsmodels.stats.multitest.multipletests``).

Intervals are clipped to the range the quantity can take and say so (``clipped``). A degenerate
case gets an honest answer, never p = 0 from a zero spread: no spread is "no test".
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_IMAGES = 30  # the t reference of a mean of bounded values over images (docs/guides/statistics.md)
MIN_DISCORDANT = 20  # fewer images where a difference is non-zero: the exact sign-flip test (2^19 flips at most)
MIN_SEEDS = 2  # a t interval needs a spread: n − 1 ≥ 1 degrees of freedom

SEED_METHOD = "Student t interval over seeds"
CROSSED_METHOD = ("two-way seeds × images interval (reports/crossed.py: seed and image variance components; "
                  "Satterthwaite df from 4 seeds, Cochran–Cox with 2–3, Student t over images with 1)")
SEED_TEST = "paired Student t over seeds"
SEED_ONLY = "training variance only: no per-image values"

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
    ``bounds``, and whether it was clipped; None for n < 2 or no spread (every seed equal: a
    zero-width interval would claim certainty the seeds cannot give)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < MIN_SEEDS or np.all(x == x[0]):
        return None
    low, high = stats.t.interval(level, df=len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    return clip_interval((float(low), float(high)), bounds)


@dataclass(frozen=True)
class Difference:
    """A mean with its interval (clipped to the quantity's range; ``clipped`` says so) and the
    two-sided p-value of "the mean is 0" from the same procedure, ``test``, which names its n.
    Where the data allow no test, ``p_value`` and ``ci`` are NaN and ``test`` says why; the exact
    test of few discordant images gives a p without an interval. ``excluded``: images left out for
    a missing (NaN) value. ``se``: the standard error the interval is ``mean ± c·se`` of (NaN where
    the procedure made none: no test, Clopper–Pearson, the exact sign-flip test)."""

    difference: float
    ci: Interval
    p_value: float
    test: str
    clipped: bool = False
    n_seeds: int = 0
    n_images: int | None = None
    excluded: int = 0
    se: float = math.nan

    @property
    def tested(self) -> bool:
        return not math.isnan(self.p_value)

    @property
    def has_interval(self) -> bool:
        return not math.isnan(self.ci[0])


def student_t(values: np.ndarray, level: float, bounds: Bounds, test: str) -> Difference:
    """One-sample Student t on ``values`` (H0: mean 0): ``scipy.stats.ttest_1samp`` and its
    ``confidence_interval(level)``, so the interval excludes 0 exactly when p < 1 − level. All
    values 0: p = 1 and the interval [0, 0] (nothing differs); all equal otherwise: no test (a
    zero spread is no evidence of a zero variance)."""
    x = np.asarray(values, dtype=np.float64)
    if np.all(x == x[0]):
        if x[0] == 0:
            return Difference(0.0, (0.0, 0.0), 1.0, f"{test}: every value 0")
        return Difference(float(x[0]), NO_INTERVAL, math.nan, f"{test}: no spread over {len(x)} values, no test")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's precision-loss note on near-constant data
        result = stats.ttest_1samp(x, 0.0)
        low, high = result.confidence_interval(level)
    ci, clipped = clip_interval((float(low), float(high)), bounds)
    return Difference(float(x.mean()), ci, float(result.pvalue), test, clipped)


def crossed_mean(values: np.ndarray, level: float, bounds: Bounds, *, difference: bool = True) -> Difference:
    """The mean of ``values`` (seeds × images, one value per seed and test image, NaN where
    undefined) with the interval and p of the crossed design (``reports.crossed``): images with a
    NaN on any seed are excluded and counted. ``difference``: the values are paired differences
    (a − b), so images where every difference is 0 carry no sign and fewer than
    ``MIN_DISCORDANT`` others get the exact sign-flip test; for a plain mean (a cell's accuracy)
    the test is of "mean 0", which only the interval is for."""
    from reports import crossed

    y = np.asarray(values, dtype=np.float64)
    if y.ndim == 1:
        y = y[None, :]
    defined = ~np.isnan(y).any(axis=0)
    excluded = int((~defined).sum())
    y = y[:, defined]
    seeds, images = y.shape
    note = f"; {excluded} image(s) with a missing value excluded" if excluded else ""

    def result(mean: float, ci: Interval, p: float, test: str, clipped: bool = False,
               se: float = math.nan) -> Difference:
        return Difference(mean, ci, p, test + note, clipped, seeds, images, excluded, se)

    if images == 0:
        return result(math.nan, NO_INTERVAL, math.nan, "no image with a value on every seed: no test")
    mean = float(y.mean())
    if np.all(y == y.flat[0]):
        return result(mean, *_no_spread(y, level, bounds, difference))
    if difference:
        discordant = y[:, np.any(y != 0, axis=0)].mean(axis=0)
        if len(discordant) < MIN_DISCORDANT:
            return result(mean, NO_INTERVAL, _sign_flip_p(discordant),
                          f"exact sign-flip test over the {len(discordant)} of {images} images where the methods "
                          f"differ ({seeds} seed(s)): too few for an interval")
    if images < MIN_IMAGES:
        return result(mean, NO_INTERVAL, math.nan, f"{images} images: no test (needs {MIN_IMAGES})")
    if seeds == 1:
        ref = crossed.image_reference(y[0])
        test = f"Student t over {images} images (1 seed: training variance not covered)"
    else:
        ref = crossed.reference(y)
        test = (f"two-way seeds × images, Cochran–Cox critical value ({seeds} seeds: the seed term has "
                f"{seeds - 1} df; {images} images)" if ref.cochran_cox else
                f"two-way seeds × images, Satterthwaite df {float(ref.df):.1f} ({seeds} seeds, {images} images)")
    if float(ref.se) == 0.0:  # every image equal, or every seed: one of the two spreads is missing
        return result(mean, NO_INTERVAL, math.nan, f"{test}: no spread, no test")
    half = float(ref.critical(level) * ref.se)
    ci, clipped = clip_interval((mean - half, mean + half), bounds)
    return result(mean, ci, crossed.p_value(ref), test, clipped, float(ref.se))


def _no_spread(y: np.ndarray, level: float, bounds: Bounds, difference: bool) -> tuple[Interval, float, str]:
    """Every seed and image has one value: nothing differs (a difference of 0), a 0/1 cell right
    (or wrong) everywhere (Clopper–Pearson over the images), or no test."""
    seeds, images = y.shape
    value = float(y.flat[0])
    if difference and value == 0:
        return (0.0, 0.0), 1.0, f"identical on all {seeds} seed(s) × {images} images"
    if not difference and value in (bounds[0], bounds[1]):
        hits = images if value == bounds[1] else 0
        low, high = stats.binomtest(hits, images).proportion_ci(level, method="exact")
        scale = bounds[1] - bounds[0]
        return ((bounds[0] + scale * low, bounds[0] + scale * high), math.nan,
                f"Clopper–Pearson over {images} images (every image {'right' if hits else 'wrong'} on all "
                f"{seeds} seed(s): training variance not covered)")
    return NO_INTERVAL, math.nan, f"no spread over {seeds} seed(s) × {images} images: no test"


def _sign_flip_p(values: np.ndarray) -> float:
    """The exact two-sided sign-flip permutation p of "symmetric about 0" for the mean of
    ``values`` (``scipy.stats.permutation_test``, every one of the 2^n sign patterns). One value has
    two patterns, ±v, both as far from 0 as the observed mean: p = 1 (scipy refuses a single value)."""
    if len(values) == 1:
        return 1.0
    result = stats.permutation_test((values,), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                                    permutation_type="samples", n_resamples=np.inf, alternative="two-sided")
    return float(min(1.0, result.pvalue))


def image_accuracy(correct: np.ndarray, level: float) -> Difference:
    """A cell's accuracy (percent) on its test images: ``correct`` is (seeds, images) 0/1 (or NaN),
    by :func:`crossed_mean` (an image is one unit of the image term however many seeds see it)."""
    return crossed_mean(100.0 * np.asarray(correct, dtype=np.float64), level, (0.0, 100.0), difference=False)


def paired_image_difference(a_values: np.ndarray, b_values: np.ndarray, level: float,
                            bounds: Bounds = (-100.0, 100.0)) -> Difference:
    """``a − b`` of a per-image value on the same seeds and images: (seeds, images) arrays paired
    by row (seed) and column (image; the caller aligns them by image id), by :func:`crossed_mean`."""
    a = np.asarray(a_values, dtype=np.float64)
    b = np.asarray(b_values, dtype=np.float64)
    return crossed_mean(a - b, level, bounds)


def paired_seed_difference(a: Sequence[float], b: Sequence[float], level: float,
                           bounds: Bounds = (-math.inf, math.inf), why: str = SEED_ONLY) -> Difference:
    """Mean of ``a − b`` over seeds (paired by position), its paired Student t interval (clipped
    to ``bounds``) and p-value (``ttest_1samp`` of the differences, = ``ttest_rel``); no test for
    n < 2. The fallback where a metric has no per-image values: it covers training variance, not
    the test images', which ``why`` says in the test's name (default ``SEED_ONLY``)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) < MIN_SEEDS:
        return Difference(float(d.mean()) if len(d) else math.nan, NO_INTERVAL, math.nan,
                          f"n = {len(d)} seed: no test (needs {MIN_SEEDS})", n_seeds=len(d))
    got = student_t(d, level, bounds, f"{SEED_TEST} ({len(d)} seeds; {why})")
    return Difference(got.difference, got.ci, got.p_value, got.test, got.clipped, n_seeds=len(d))


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
