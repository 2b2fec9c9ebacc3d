"""The interval and test of a mean over a crossed seeds × test-images design (docs/guides/statistics.md,
"Seeds and images are crossed").

Every seed of every method sees every test image, so a per-image value (0/1 correctness, or an
explanation metric's per-image part) ``y[s, i]`` — or a paired difference of two methods on the same
seed and image — follows the two-way random-effects model without replication

    y[s, i] = μ + σ_s + ι_i + ε_si

(Cornfield & Tukey 1956; generalizability theory: Brennan 2001, "Generalizability Theory", §3).
Its mean over S seeds and I images has variance σ²_seed/S + σ²_image/I + σ²_resid/(S·I). With the
two-way ANOVA mean squares (expected values E[MS_seed] = σ²_resid + I·σ²_seed,
E[MS_image] = σ²_resid + S·σ²_image, E[MS_resid] = σ²_resid) the method-of-moments estimate is

    V̂ = MS_seed/(S·I) + max(MS_image − MS_resid, 0)/(S·I)

the seed-level variance of the mean (which holds the residual term) plus the image component the
seeds share, the latter set to 0 when its estimate is negative (Brennan 2001, §3.4); the seed
mean square is never truncated, so a chance-low draw of its S − 1 degrees of freedom is not
replaced by 0 (the pretest that truncating it amounts to rejects up to 15.5 % of true nulls with
2 seeds in ``reports.stats_simulation``). Its reference distribution:

- S ≥ 4: Student t with Satterthwaite's (1946) degrees of freedom of that sum of mean squares;
- S = 2, 3: MS_seed has one or two degrees of freedom, where Satterthwaite's estimated df is
  anti-conservative (it rejects up to 15.3 % of true nulls with 2 seeds, 9.1 % with 3, in
  ``reports.stats_simulation``: a chance-low MS_seed both shrinks the variance and raises the df);
  the critical value is Cochran & Cox's (1950) weighted mean of the two parts' t quantiles
  (weights: the parts' variances), which holds the level at the price of power;
- S = 1: no seed term exists; Student t over the images, stating that training variance is not
  covered.

The interval is ``mean ± c·√V̂`` and the p-value is the level at which that interval touches 0,
so the interval excludes 0 exactly when p < 1 − level. The arrays may carry leading batch axes
(``reports.stats_simulation`` runs thousands of designs at once through the same code).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats


SMALLEST_P = 1e-100  # with Cochran–Cox (2–3 seeds), a p below it is reported as it
MIN_SATTERTHWAITE_SEEDS = 4  # fewer: Cochran–Cox


@dataclass(frozen=True)
class MeanSquares:
    """The two-way ANOVA of ``y[..., s, i]``: grand mean and the three mean squares (each with the
    batch shape of ``y``), with the design's S seeds and I images."""

    mean: np.ndarray
    seed: np.ndarray
    image: np.ndarray
    residual: np.ndarray
    seeds: int
    images: int


def mean_squares(y: np.ndarray) -> MeanSquares:
    """The mean squares of the two-way layout without replication (seeds × images), S, I ≥ 2."""
    y = np.asarray(y, dtype=np.float64)
    seeds, images = y.shape[-2:]
    grand = y.mean(axis=(-2, -1))
    seed_means = y.mean(axis=-1)
    image_means = y.mean(axis=-2)
    ms_seed = images * ((seed_means - grand[..., None]) ** 2).sum(axis=-1) / (seeds - 1)
    ms_image = seeds * ((image_means - grand[..., None]) ** 2).sum(axis=-1) / (images - 1)
    residual = y - seed_means[..., :, None] - image_means[..., None, :] + grand[..., None, None]
    ms_residual = (residual ** 2).sum(axis=(-2, -1)) / ((seeds - 1) * (images - 1))
    return MeanSquares(grand, ms_seed, ms_image, ms_residual, seeds, images)


@dataclass(frozen=True)
class Reference:
    """The standard error of a design's mean and what its critical value is made of: the seed
    part's variance (``seed_var``, df S − 1) and the image part's (``image_var``, df
    ``image_df``); ``df`` is Satterthwaite's for the sum (used from ``MIN_SATTERTHWAITE_SEEDS``)."""

    mean: np.ndarray
    se: np.ndarray
    seed_var: np.ndarray
    image_var: np.ndarray
    image_df: np.ndarray
    df: np.ndarray
    seeds: int
    images: int

    @property
    def cochran_cox(self) -> bool:
        return 2 <= self.seeds < MIN_SATTERTHWAITE_SEEDS

    def critical(self, level: float) -> np.ndarray:
        """The two-sided critical value at confidence ``level``."""
        return self.tail_quantile((1.0 - level) / 2)

    def tail_quantile(self, tail: float) -> np.ndarray:
        """The value the reference distribution exceeds with probability ``tail`` (``isf``: exact
        for the smallest tails)."""
        if self.cochran_cox:  # Cochran & Cox (1950): the parts' t quantiles weighted by their variances
            total = self.seed_var + self.image_var
            with np.errstate(invalid="ignore", divide="ignore"):
                return (self.seed_var * stats.t.isf(tail, self.seeds - 1)
                        + self.image_var * stats.t.isf(tail, np.maximum(self.image_df, 1.0))) / total
        return stats.t.isf(tail, self.df)


def reference(y: np.ndarray) -> Reference:
    """The crossed design's standard error and reference distribution (module docstring) of the
    mean of ``y[..., s, i]`` with S ≥ 2 seeds and I ≥ 2 images."""
    return reference_of(mean_squares(y))


def reference_of(ms: MeanSquares) -> Reference:
    """:func:`reference` from the design's mean squares."""
    s, i = ms.seeds, ms.images
    image_part = np.maximum(ms.image - ms.residual, 0.0)
    has_image = image_part > 0
    variance = (ms.seed + image_part) / (s * i)
    with np.errstate(invalid="ignore", divide="ignore"):
        # Satterthwaite (1946): df = (Σ c_k MS_k)² / Σ (c_k MS_k)² / df_k over the mean squares used
        image_terms = ms.image ** 2 / (i - 1) + ms.residual ** 2 / ((s - 1) * (i - 1))
        df = (ms.seed + image_part) ** 2 / (ms.seed ** 2 / (s - 1) + np.where(has_image, image_terms, 0.0))
        image_df = np.where(has_image, image_part ** 2 / image_terms, 1.0)
    return Reference(ms.mean, np.sqrt(variance), ms.seed / (s * i), image_part / (s * i), image_df, df, s, i)


def image_reference(y: np.ndarray) -> Reference:
    """One seed (``y[..., i]``): Student t over the images, df I − 1 (no seed term)."""
    y = np.asarray(y, dtype=np.float64)
    images = y.shape[-1]
    variance = y.var(axis=-1, ddof=1) / images
    df = np.full(variance.shape, images - 1.0)
    return Reference(y.mean(axis=-1), np.sqrt(variance), np.zeros_like(variance), variance, df, df, 1, images)


def p_value(ref: Reference) -> float:
    """The two-sided p of "the mean is 0" for one design: the level at which ``mean ± c·se``
    touches 0 (the interval excludes 0 exactly when p < 1 − level)."""
    mean, se = float(ref.mean), float(ref.se)
    if mean == 0.0:
        return 1.0
    t = abs(mean) / se
    if not ref.cochran_cox:
        return float(2 * stats.t.sf(t, float(ref.df)))

    def excess(log_p: float) -> float:  # c(p) − |t|: decreasing in p, 0 at the p-value
        return float(ref.tail_quantile(math.exp(log_p) / 2)) - t

    lowest, highest = math.log(SMALLEST_P), 0.0  # scipy's t.isf loses its tail below ~1e-300
    if excess(lowest) <= 0:
        return SMALLEST_P
    return math.exp(optimize.brentq(excess, lowest, highest, xtol=1e-13, rtol=1e-13))
