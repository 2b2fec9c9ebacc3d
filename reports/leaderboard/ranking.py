"""Ranking the entries of a board on one metric, with statistical ties.

Entries are ordered by their mean over replicates, best first, ties in the mean broken by label for
a stable order. Which mean is best depends on the metric (reports/leaderboard/ranked.py): the
highest for accuracy, the explanation metrics, ``acc_attacked`` and ``region_perturbation``, the
lowest for the robustness stage's lower-is-better scores (``reports.columns.LOWER_IS_BETTER``:
``pac``, ``prc``, ``plc``, ``pixel_flipping``, ``road``, ``infidelity``). The entry with the best
mean leads; every other entry is compared with it by the procedure of
``protobench compare`` (``reports.paired.cell_difference``: paired on the (source, seed)
replicates both have and, where both have per-image records, on test images: the crossed
replicates × images design, ``reports/crossed.py``), which gives the difference with its interval
and p from one procedure (both kept; the interval is not adjusted for multiplicity), and the
p-values of one board × metric are Holm-corrected together (``reports.stats.holm``). The test is
two-sided and its difference is entry − leader in the metric's own units, whatever the direction
(positive for a worse entry on a lower-is-better metric). An entry whose Holm-adjusted p is at
least α is **tied with the best**; the group is decided by these tests, never by the means. Ranks:
1 for the leader and every entry tied with it; any other entry gets 1 + the number of entries with
a better mean (competition ranking). An entry that shares no (source, seed) with the leader, or
whose test images differ, cannot be tested: it is marked ``untested`` with the reason, not tied.

Each entry's own interval is that of ``report --ci``, the one policy of ``reports.intervals``:
over replicates × test images for a metric with per-image records (``reports.stats.crossed_mean``;
over the images only where the replicates gave one result), else Student t over replicates; each of
its sources gets the same over that source's seeds (``per_source``), and an entry of several
sources the between-lab check (reports/leaderboard/labs.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from benchmark.errors import ProtobenchError
from reports.leaderboard.entries import Entry, replicate_runs
from reports.leaderboard.labs import BetweenLabs, between_labs
from reports.leaderboard.ranked import LOWER, better, is_better
from reports.paired import cell_difference
from reports.intervals import CellInterval, cell_interval
from reports.stats import holm

BEST, TIED, BELOW, UNTESTED = "best", "tied", "below", "untested"


@dataclass(frozen=True)
class Standing:
    """One entry's line in one board × metric."""

    entry: str  # Entry.id
    mean: float
    std: float | None
    n_seeds: int
    ci: tuple[float, float] | None
    interval: str  # the interval's procedure and n, or why there is none
    ci_n: int  # the distinct results behind the interval (replicates; 1 where deterministic)
    ci_images: int | None  # the test images behind a per-image interval, else None
    rank: int
    group: str  # BEST, TIED, BELOW or UNTESTED
    difference: float | None  # entry − leader
    difference_ci: tuple[float, float] | None  # its interval, from the procedure of p (None: none, test says why)
    p: float | None
    p_holm: float | None
    test: str  # the procedure of p with its n, or why there is no test
    per_source: tuple[SourceSummary, ...]
    between_labs: BetweenLabs | None  # None: one source
    rescored: bool  # every run's value re-derived from its records (False: a run's is as reported)


@dataclass(frozen=True)
class SourceSummary:
    """One source's runs in one entry and metric: their mean and interval."""

    source: str
    n_seeds: int
    mean: float
    ci: tuple[float, float] | None
    interval: str


def _per_source(entry: Entry, metric: str, level: float) -> tuple[SourceSummary, ...]:
    runs = replicate_runs(entry)
    found = []
    for name in sorted(set(runs["source_name"])):
        mine = runs[(runs["source_name"] == name) & runs[metric].notna()]
        if len(mine):
            ci, interval = _interval(mine, metric, level)
            found.append(SourceSummary(name, len(mine), float(mine[metric].mean()), ci, interval))
    return tuple(found)


def _between_labs(entry: Entry, metric: str) -> BetweenLabs | None:
    runs = entry.runs
    return between_labs({name: runs.loc[runs["source_name"] == name, metric].tolist()
                         for name in sorted(set(runs["source_name"]))})


def _rescored(entry: Entry, metric: str) -> bool:
    """Whether no run of the entry kept its recorded ``metric`` unchecked (reading.py ``as_reported``)."""
    scored = entry.runs[entry.runs[metric].notna()]
    return not any(metric in str(kept).split() for kept in scored["as_reported"])


def _own_interval(entry: Entry, metric: str, level: float) -> CellInterval:
    runs = replicate_runs(entry)
    return cell_interval(runs[runs[metric].notna()], metric, level)


def _interval(runs: pd.DataFrame, metric: str, level: float) -> tuple[tuple[float, float] | None, str]:
    """``report --ci``'s interval of ``runs`` (``seed``: the replicate) on ``metric``: the one policy
    of ``reports.intervals``."""
    got = cell_interval(runs, metric, level)
    return got.ci, got.procedure


def rank_metric(board_entries: list[Entry], metric: str, *, level: float, alpha: float) -> list[Standing]:
    """The standings of the entries that have ``metric`` (see the module)."""
    scored = [e for e in board_entries if e.runs[metric].notna().any()]
    if not scored:
        return []
    means = {e.id: float(e.runs[metric].mean()) for e in scored}
    sign = 1.0 if better(metric) == LOWER else -1.0  # best first
    order = sorted(scored, key=lambda e: (sign * means[e.id], e.label, e.id))
    leader = order[0]
    tests: dict[str, tuple[float | None, tuple[float, float] | None, float | None, str]] = {}
    for entry in order[1:]:
        a, b = (replicate_runs(x).dropna(subset=[metric]).set_index("seed") for x in (entry, leader))
        try:
            found = cell_difference(a, b, metric, level, names=(entry.label, leader.label))
        except ProtobenchError as err:
            tests[entry.id] = (None, None, None, f"not comparable: {err}")
            continue
        if found is None:
            tests[entry.id] = (None, None, None,
                               "no (source, seed) replicate in common with the leader: no paired test")
        else:
            p = None if math.isnan(found.p_value) else found.p_value
            ci = (float(found.ci[0]), float(found.ci[1])) if found.has_interval else None
            tests[entry.id] = (found.difference, ci, p, found.test)
    tested = [k for k, (_, _, p, _) in tests.items() if p is not None]
    adjusted = dict(zip(tested, holm([tests[k][2] for k in tested]))) if tested else {}
    standings = []
    for entry in order:
        runs = entry.runs[metric].dropna()
        own = _own_interval(entry, metric, level)
        std = float(runs.std(ddof=1)) if len(runs) > 1 else None
        if entry is leader:
            group, difference, difference_ci, p, p_holm = BEST, 0.0, None, None, None
            test = f"the leader ({'lowest' if better(metric) == LOWER else 'highest'} mean)"
        else:
            difference, difference_ci, p, test = tests[entry.id]
            p_holm = adjusted.get(entry.id)
            group = UNTESTED if p_holm is None else (TIED if p_holm >= alpha else BELOW)
        rank = 1 if group in (BEST, TIED) else 1 + sum(is_better(metric, means[o.id], means[entry.id]) for o in scored)
        standings.append(Standing(entry=entry.id, mean=means[entry.id], std=std, n_seeds=len(runs), ci=own.ci,
                                  interval=own.procedure, ci_n=own.n, ci_images=own.images, rank=rank, group=group,
                                  difference=None if difference is None or np.isnan(difference) else difference,
                                  difference_ci=difference_ci, p=p, p_holm=p_holm, test=test,
                                  per_source=_per_source(entry, metric, level),
                                  between_labs=_between_labs(entry, metric), rescored=_rescored(entry, metric)))
    return standings
