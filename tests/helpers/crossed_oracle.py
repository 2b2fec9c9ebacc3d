"""An independent computation of the crossed seeds × images interval (reports/crossed.py): the mean
squares from statsmodels' two-way ANOVA of an OLS fit with seed and image factors (not the suite's
numpy sums of squares), the variance of the mean, Satterthwaite's df and Cochran–Cox's critical
value written from their textbook formulas, the p-value by bisection on the interval's edge."""
from __future__ import annotations

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf
from scipy import stats
from statsmodels.stats.anova import anova_lm


def anova_mean_squares(y: np.ndarray) -> tuple[float, float, float]:
    """(MS_seed, MS_image, MS_residual) of the additive two-way model (statsmodels, type II)."""
    seeds, images = y.shape
    frame = pd.DataFrame({"y": y.ravel(), "seed": np.repeat(np.arange(seeds), images),
                          "image": np.tile(np.arange(images), seeds)})
    table = anova_lm(smf.ols("y ~ C(seed) + C(image)", frame).fit(), typ=2)
    ms = table["sum_sq"] / table["df"]
    return float(ms["C(seed)"]), float(ms["C(image)"]), float(ms["Residual"])


def crossed_interval(y: np.ndarray, level: float) -> tuple[float, tuple[float, float], float]:
    """(mean, interval, p) of the mean of ``y`` (seeds × images, S ≥ 2)."""
    s, i = y.shape
    ms_s, ms_i, ms_e = anova_mean_squares(y)
    image_component = max(ms_i - ms_e, 0.0)  # S · σ²_image, truncated at 0 (Brennan 2001)
    seed_var, image_var = ms_s / (s * i), image_component / (s * i)
    se = np.sqrt(seed_var + image_var)
    image_df = image_component ** 2 / (ms_i ** 2 / (i - 1) + ms_e ** 2 / ((s - 1) * (i - 1))) if image_component else 1.0
    df = (ms_s + image_component) ** 2 / (ms_s ** 2 / (s - 1) + (
        ms_i ** 2 / (i - 1) + ms_e ** 2 / ((s - 1) * (i - 1)) if image_component else 0.0))

    def critical(alpha: float) -> float:
        if s in (2, 3):  # Cochran & Cox: the t quantiles weighted by the parts' variances
            return (seed_var * stats.t.isf(alpha / 2, s - 1) + image_var * stats.t.isf(alpha / 2, max(image_df, 1.0))) \
                / (seed_var + image_var)
        return float(stats.t.isf(alpha / 2, df))

    mean = float(y.mean())
    half = critical(1 - level) * se
    low, high = 1e-100, 1.0  # p: the α whose interval touches 0 (critical decreasing in α)
    for _ in range(200):
        mid = np.sqrt(low * high) if low < 1e-10 else (low + high) / 2
        low, high = (mid, high) if critical(mid) * se > abs(mean) else (low, mid)
    return mean, (mean - half, mean + half), high
