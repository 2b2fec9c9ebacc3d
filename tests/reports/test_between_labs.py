"""The leaderboard's between-lab check (reports/leaderboard/labs.py): scipy's one-way ANOVA as the
oracle, its "no test" cases, and its false-positive rate and power by simulation on the crossed
seeds × images design the leaderboard's runs come from (labs × seeds runs on the same test images)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from reports.leaderboard.labs import between_labs

ALPHA = 0.05
REPEATS = 2000


def test_the_check_is_scipys_one_way_anova_and_says_when_there_is_none() -> None:
    values = {"labA": [80.0, 82.5, 81.0], "labB": [78.0, 79.5], "labC": [85.0, 84.0, math.nan]}
    found = between_labs(values)
    oracle = stats.f_oneway([80.0, 82.5, 81.0], [78.0, 79.5], [85.0, 84.0])
    assert found is not None and found.statistic == pytest.approx(oracle.statistic)
    assert found.p == pytest.approx(oracle.pvalue) and found.df == (2, 4) and (found.n_runs, found.n_sources) == (7, 3)
    assert found.test.endswith("F(2, 4) over 7 runs from 3 sources")
    assert between_labs({"labA": [80.0, 81.0]}) is None  # one source: no check
    one_each = between_labs({"labA": [80.0], "labB": [81.0]})
    assert one_each is not None and one_each.p is None and "needs a source with two seeds" in one_each.test
    flat = between_labs({"labA": [80.0, 80.0], "labB": [81.0, 81.0]})
    assert flat is not None and flat.p is None and "no spread within a source" in flat.test


def _rejections(labs: int, seeds: int, images: int, shift: float, lab_effect: float, base: float,
                rng: np.random.Generator) -> float:
    """Share of REPEATS simulated leaderboards whose check rejects at ALPHA. Per image i, lab l and
    seed s the run is right with probability expit(logit(base) + u_i + w_ls + a_l): u_i ~ N(0, 1)
    the image's difficulty (shared by every run), w_ls ~ N(0, τ) the seed's shift (τ makes a run's
    accuracy spread by ``shift`` points, reports/stats_simulation.py), a_l the lab's effect
    (``lab_effect`` points apart between the first lab and the others)."""
    tau = shift / (100 * base * (1 - base))
    step = lab_effect / (100 * base * (1 - base))
    rejected = 0
    for _ in range(REPEATS):
        u = rng.normal(0.0, 1.0, images)
        w = rng.normal(0.0, tau, (labs, seeds)) if tau else np.zeros((labs, seeds))
        a = np.where(np.arange(labs) == 0, step, 0.0)
        eta = special.logit(base) + u[None, None, :] + w[:, :, None] + a[:, None, None]
        runs = 100.0 * (rng.random(eta.shape) < special.expit(eta)).mean(axis=2)
        found = between_labs({f"lab{l}": runs[l].tolist() for l in range(labs)})
        rejected += found is not None and found.p is not None and found.p < ALPHA
    return rejected / REPEATS


@pytest.mark.parametrize(("labs", "seeds", "shift"), [(2, 2, 0.0), (2, 3, 1.0), (3, 3, 0.5), (2, 5, 1.0)])
def test_false_positive_rate_is_alpha_on_the_crossed_design(labs: int, seeds: int, shift: float) -> None:
    """No lab effect: the check rejects at α (within the binomial 99.9 % band of REPEATS draws)."""
    rate = _rejections(labs, seeds, 200, shift, 0.0, 0.8, np.random.default_rng(labs * 100 + seeds))
    band = 3.3 * math.sqrt(ALPHA * (1 - ALPHA) / REPEATS)
    assert abs(rate - ALPHA) <= band, rate


def test_a_real_lab_effect_is_found() -> None:
    """Power: one lab 4 points above the other on 5 seeds each (seed spread 1 point, 1,000 images) is found."""
    assert _rejections(2, 5, 1000, 1.0, 4.0, 0.8, np.random.default_rng(7)) > 0.8
