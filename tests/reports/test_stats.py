"""reports.stats against independent implementations on known data: scipy and statsmodels where
they hold the test, autorank where installed, brute-force loops otherwise (source: issue 19 item 6)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from reports.stats import (holm, image_interval, mcnemar_p, paired_image_difference, paired_seed_difference,
                           probability_of_improvement, seed_interval)

RNG = np.random.default_rng(0)


def test_seed_interval_is_the_textbook_t_interval() -> None:
    x = [57.1, 62.0, 49.3, 60.2]
    mean, s, n = np.mean(x), np.std(x, ddof=1), len(x)
    half = sps.t.ppf(0.975, n - 1) * s / math.sqrt(n)  # mean ± t_{0.975, n-1} s / √n
    assert seed_interval(x, 0.95) == pytest.approx((mean - half, mean + half), abs=1e-12)
    assert seed_interval([50.0], 0.95) is None
    assert seed_interval([50.0, 50.0], 0.95) == (50.0, 50.0)


def test_image_interval_covers_the_accuracy_and_narrows_with_more_images() -> None:
    small = [RNG.random(50) < 0.6, RNG.random(50) < 0.7]
    large = [RNG.random(2000) < 0.6, RNG.random(2000) < 0.7]
    lo, hi = image_interval(small, 0.95)
    point = 100 * np.mean([c.mean() for c in small])
    assert lo < point < hi
    lo2, hi2 = image_interval(large, 0.95)
    assert hi2 - lo2 < (hi - lo) / 3
    # the normal approximation of a stratified mean of proportions: se² = Σ p(1-p)/n / S²
    p = np.array([c.mean() for c in large])
    se = 100 * math.sqrt(np.sum(p * (1 - p) / 2000)) / 2
    assert (hi2 - lo2) == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_mcnemar_equals_the_exact_binomial_and_the_chi2_formula() -> None:
    a = np.array([1] * 30 + [1] * 9 + [0] * 3 + [0] * 8, dtype=bool)  # b = 9 (a only), c = 3 (b only)
    b = np.array([1] * 30 + [0] * 9 + [1] * 3 + [0] * 8, dtype=bool)
    assert mcnemar_p(a, b) == pytest.approx(sps.binomtest(3, 12, 0.5).pvalue, abs=1e-12)
    a = np.r_[np.ones(40, bool), np.zeros(20, bool)]  # 40 vs 20 discordant: χ² with continuity correction
    b = ~a
    chi2 = (abs(40 - 20) - 1) ** 2 / 60
    assert mcnemar_p(a, b) == pytest.approx(sps.chi2.sf(chi2, 1), abs=1e-12)
    assert mcnemar_p(a, a) == 1.0


def test_paired_image_difference() -> None:
    a = RNG.random((2, 400)) < 0.7
    b = a.copy()
    b[:, :40] = ~b[:, :40]
    d = paired_image_difference(a, b, 0.95)
    assert d.difference == pytest.approx(100 * (a.mean() - b.mean()))
    assert d.ci[0] <= d.difference <= d.ci[1] and d.test == "McNemar"
    assert d.p_value == pytest.approx(mcnemar_p(a.ravel(), b.ravel()))
    # a brute-force loop: resample image columns (the same for both and every seed), percentiles
    rng = np.random.default_rng(1)
    draws = []
    for _ in range(4000):
        cols = rng.integers(0, 400, 400)
        draws.append(100 * (a[:, cols].mean() - b[:, cols].mean()))
    assert d.ci == pytest.approx(tuple(np.percentile(draws, [2.5, 97.5])), abs=0.5)
    same = paired_image_difference(a, a, 0.95)
    assert (same.difference, same.ci, same.p_value) == (0.0, (0.0, 0.0), 1.0)


def test_paired_seed_difference_is_scipys_wilcoxon_and_the_paired_t_interval() -> None:
    a, b = [60.0, 58.5, 63.1, 61.0, 59.9], [57.0, 58.9, 60.2, 57.5, 55.0]
    d = paired_seed_difference(a, b, 0.95)
    diff = np.subtract(a, b)
    assert d.p_value == pytest.approx(sps.wilcoxon(a, b).pvalue)
    # exact signed-rank distribution by enumeration of the 2^n sign patterns
    ranks = sps.rankdata(np.abs(diff))
    w = ranks[diff > 0].sum()
    null = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product([0, 1], repeat=5)]
    tail = min(np.mean([x >= w for x in null]), np.mean([x <= w for x in null]))
    assert d.p_value == pytest.approx(min(1.0, 2 * tail))
    t = sps.ttest_rel(a, b).confidence_interval(0.95)
    assert d.ci == pytest.approx((t.low, t.high))
    assert paired_seed_difference([1.0], [0.0], 0.95).ci == (pytest.approx(math.nan, nan_ok=True),) * 2
    assert paired_seed_difference([2.0, 3.0], [2.0, 3.0], 0.95).p_value == 1.0


def test_probability_of_improvement_counts_pairs() -> None:
    a, b = [3.0, 5.0, 5.0, 9.0], [5.0, 1.0, 4.0]
    pairs = [(x > y) + 0.5 * (x == y) for x in a for y in b]
    assert probability_of_improvement(a, b) == pytest.approx(np.mean(pairs))


def test_holm_equals_the_step_down_formula_and_keeps_nan() -> None:
    p = [0.01, 0.04, math.nan, 0.03, 0.2]
    finite = sorted((v, i) for i, v in enumerate(p) if not math.isnan(v))
    expected, running = {}, 0.0
    for k, (v, i) in enumerate(finite):  # p_(k) · (m − k), made monotone, capped at 1
        running = max(running, min(1.0, v * (len(finite) - k)))
        expected[i] = running
    got = holm(p)
    assert math.isnan(got[2])
    assert [got[i] for i in sorted(expected)] == pytest.approx([expected[i] for i in sorted(expected)])
