"""Per-source breakdown of an entry, and the between-lab check: does the lab explain variance in
an entry's runs beyond the seeds?

The replicate unit is a (source, seed) run (reports/leaderboard/entries.py). Each run's value is
its mean over the test images, the same images for every run of the entry (entries align on the
test data's fingerprint), so an image's difficulty adds the same amount to every run and cancels
from every contrast between labs. With ``y_ls`` the value of lab l's seed s,

    y_ls = μ + a_l + e_ls,    e_ls independent across runs (the seed's training noise and its
                              seed × image interaction averaged over the images)

and the check is the **one-way ANOVA F test** of H0: every a_l = 0 (Fisher; scipy.stats.f_oneway):
F = [SS_between / (k − 1)] / [SS_within / (n − k)] against F(k − 1, n − k), with n runs from k
labs. It needs two labs and a lab with two seeds (n > k), and a spread within labs; otherwise it
says why there is none. Its false-positive rate on the crossed seeds × images design is checked
by simulation (tests/reports/test_between_labs.py)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

ANOVA = "one-way ANOVA F test of the source (scipy.stats.f_oneway), runs (source, seed) as replicates"


@dataclass(frozen=True)
class BetweenLabs:
    """The between-lab check of one entry on one metric."""

    test: str  # the procedure with its n, or why there is no test
    statistic: float | None  # F
    df: tuple[int, int] | None  # (k − 1, n − k)
    p: float | None
    n_runs: int
    n_sources: int

    def to_json(self) -> dict[str, object]:
        return {"test": self.test, "statistic": self.statistic, "df_between": None if self.df is None else self.df[0],
                "df_within": None if self.df is None else self.df[1], "p": self.p, "n_runs": self.n_runs,
                "n_sources": self.n_sources}


def between_labs(values: Mapping[str, Sequence[float]]) -> BetweenLabs | None:
    """The check over each source's run values (``values``: source → its runs' values; NaN left
    out); None for an entry of one source."""
    groups = {name: np.asarray([v for v in runs if not math.isnan(v)], dtype=np.float64)
              for name, runs in values.items()}
    groups = {name: g for name, g in groups.items() if g.size}
    k, n = len(groups), sum(g.size for g in groups.values())
    if k < 2:
        return None
    if n <= k:
        return BetweenLabs(f"{ANOVA}: no test over {n} runs from {k} sources (needs a source with two seeds)",
                           None, None, None, n, k)
    within = sum(float(((g - g.mean()) ** 2).sum()) for g in groups.values())
    if within == 0.0:
        return BetweenLabs(f"{ANOVA}: no test over {n} runs from {k} sources (no spread within a source)",
                           None, None, None, n, k)
    found = stats.f_oneway(*groups.values())
    return BetweenLabs(f"{ANOVA}: F({k - 1}, {n - k}) over {n} runs from {k} sources", float(found.statistic),
                       (k - 1, n - k), float(found.pvalue), n, k)
