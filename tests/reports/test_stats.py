"""reports.stats against independent implementations on known data: scipy and statsmodels where
they hold the test, textbook formulas and brute-force loops otherwise (source: issues 19 and 29)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from reports.stats import (MIN_IMAGES, holm, image_accuracy, paired_image_difference, paired_seed_difference,
                           probability_of_improvement, seed_interval, wilcoxon_p)

RNG = np.random.default_rng(0)


def test_seed_interval_is_the_textbook_t_interval() -> None:
    x = [57.1, 62.0, 49.3, 60.2]
    mean, s, n = np.mean(x), np.std(x, ddof=1), len(x)
    half = sps.t.ppf(0.975, n - 1) * s / math.sqrt(n)  # mean ± t_{0.975, n-1} s / √n
    assert seed_interval(x, 0.95) == (pytest.approx((mean - half, mean + half), abs=1e-12), False)
    assert seed_interval([50.0], 0.95) is None
    assert seed_interval([50.0, 50.0], 0.95) is None  # no spread: no zero-width interval (issue 42)
    # two seeds: ± 12.7 standard errors, clipped to the metric's range and marked
    (low, high), clipped = seed_interval([97.0, 99.0], 0.95, (0.0, 100.0))
    assert clipped and high == 100.0 and low == pytest.approx(98 - sps.t.ppf(0.975, 1) * 1.0)


def test_one_seed_accuracy_is_the_t_interval_over_images_and_says_training_is_not_covered() -> None:
    correct = RNG.random((1, 200)) < 0.7
    got = image_accuracy(correct, 0.95)
    oracle = sps.ttest_1samp(100.0 * correct[0], 0.0)
    assert got.difference == pytest.approx(100 * correct.mean())
    assert got.ci == pytest.approx(tuple(oracle.confidence_interval(0.95)), rel=1e-12)
    assert "1 seed: training variance not covered" in got.test and "200 images" in got.test
    few = image_accuracy(RNG.random((3, MIN_IMAGES - 1)) < 0.7, 0.95)
    assert math.isnan(few.p_value) and "no test" in few.test and f"needs {MIN_IMAGES}" in few.test
    (low, high) = image_accuracy(np.ones((2, 40), bool) & (np.arange(40) > 0), 0.95).ci  # 39 of 40 right
    assert high == 100.0 and low < 100.0


def test_a_perfect_cell_gets_clopper_pearson_not_a_zero_width_interval() -> None:
    got = image_accuracy(np.ones((3, 1000), bool), 0.95)
    assert got.ci == pytest.approx((100 * (0.025 ** (1 / 1000)), 100.0), rel=1e-9)  # (α/2)^(1/n): exact bound at k = n
    assert "Clopper–Pearson over 1000 images" in got.test and "training variance not covered" in got.test


def test_paired_image_difference_with_one_seed_is_scipys_one_sample_t_over_images() -> None:
    a = RNG.random((1, 400)) < 0.7
    b = a.copy()
    b[:, :40] = ~b[:, :40]
    d = paired_image_difference(100.0 * a, 100.0 * b, 0.95)  # percent, as the records give them
    oracle = sps.ttest_1samp(100 * (a[0].astype(float) - b[0]), 0.0)
    assert d.difference == pytest.approx(100 * (a.mean() - b.mean()))
    assert d.p_value == pytest.approx(oracle.pvalue, rel=1e-12) and d.test.startswith("Student t over 400 images")
    assert d.ci == pytest.approx(tuple(oracle.confidence_interval(0.95)), rel=1e-12)
    same = paired_image_difference(a, a, 0.95)
    assert (same.difference, same.ci, same.p_value) == (0.0, (0.0, 0.0), 1.0)


def test_paired_seed_difference_is_scipys_paired_t() -> None:
    a, b = [60.0, 58.5, 63.1, 61.0, 59.9], [57.0, 58.9, 60.2, 57.5, 55.0]
    d = paired_seed_difference(a, b, 0.95, (-100.0, 100.0))
    oracle = sps.ttest_rel(a, b)
    assert d.p_value == pytest.approx(oracle.pvalue, rel=1e-12) and d.test.startswith("paired Student t over seeds (5 seeds")
    assert "training variance only" in d.test
    assert d.ci == pytest.approx(tuple(oracle.confidence_interval(0.95)), rel=1e-12) and not d.clipped
    one = paired_seed_difference([1.0], [0.0], 0.95)
    assert math.isnan(one.p_value) and math.isnan(one.ci[0]) and one.test.startswith("n = 1")
    assert paired_seed_difference([2.0, 3.0], [2.0, 3.0], 0.95).p_value == 1.0
    equal = paired_seed_difference([2.0, 3.0], [3.0, 4.0], 0.95)  # two equal differences: no spread, no p = 0
    assert math.isnan(equal.p_value) and not equal.has_interval and "no spread" in equal.test
    wide = paired_seed_difference([90.0, 40.0], [10.0, 30.0], 0.95, (-100.0, 100.0))
    assert wide.clipped and wide.ci == (-100.0, 100.0)


def test_wilcoxon_p_enumerates_the_signed_rank_distribution() -> None:
    a, b = [60.0, 58.5, 63.1, 61.0, 59.9], [57.0, 58.9, 60.2, 57.5, 55.0]
    diff = np.subtract(a, b)
    ranks = sps.rankdata(np.abs(diff))
    w = ranks[diff > 0].sum()
    null = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product([0, 1], repeat=5)]
    tail = min(np.mean([x >= w for x in null]), np.mean([x <= w for x in null]))
    assert wilcoxon_p(a, b) == pytest.approx(min(1.0, 2 * tail))
    assert wilcoxon_p([1.0, 2.0], [1.0, 2.0]) == 1.0


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


def test_one_discordant_image_gets_the_exact_sign_flip_p_of_one() -> None:
    from reports.stats import paired_image_difference

    a = np.array([[1.0, 0.0, 0.0, 1.0]])
    b = np.array([[1.0, 0.0, 0.0, 0.0]])  # the methods differ on one image: its two sign patterns tie
    got = paired_image_difference(a, b, 0.95, (-100.0, 100.0))
    assert got.p_value == 1.0 and got.difference == 0.25
