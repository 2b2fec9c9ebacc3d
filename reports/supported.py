""""What this grid supports": per cell, every pair of methods compared on every metric both have
(``reports.paired.cell_difference``: the crossed seeds × images procedure where per-image records
exist, else paired Student t over seeds), Holm-corrected over all the comparisons of the call
(``reports.stats.holm``). An ordering is *supported* where it is significant in the same direction
on every metric the pair was tested on (two or more), and *flips* where it is significantly one
way on a metric and significantly the other way on another.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import pandas as pd

from reports.agreement import cells
from reports.paired import cell_difference
from reports.stats import holm


@dataclass(frozen=True)
class Ordering:
    """Methods ``a`` and ``b`` of one cell: the metrics where a is significantly better, worse, or neither."""

    cell: str
    a: str
    b: str
    better: tuple[str, ...]
    worse: tuple[str, ...]
    undecided: tuple[str, ...]

    @property
    def supported(self) -> bool:
        return not self.undecided and not self.flips and len(self.better) + len(self.worse) >= 2

    @property
    def flips(self) -> bool:
        return bool(self.better) and bool(self.worse)


def orderings(frame: pd.DataFrame, metrics: list[str], level: float) -> tuple[list[Ordering], int]:
    """Every pair's ordering per metric at family-wise level ``1 − level`` (Holm), and how many tests it took."""
    tested: list[tuple[str, str, str, str, float, float]] = []  # cell, a, b, metric, a − b, p
    for label, cell in cells(frame):
        methods = sorted(cell["method"].astype(str).unique())
        by_method = {m: cell[cell["method"] == m].set_index("seed") for m in methods}
        for a, b in combinations(methods, 2):
            for metric in metrics:
                diff = cell_difference(by_method[a], by_method[b], metric, level, names=(a, b))
                if diff is not None and diff.tested:
                    tested.append((label, a, b, metric, diff.difference, diff.p_value))
    adjusted = holm([row[5] for row in tested])
    verdicts: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    for (label, a, b, metric, difference, _), p in zip(tested, adjusted):
        verdict = "undecided" if p >= 1 - level else ("better" if difference > 0 else "worse")
        verdicts.setdefault((label, a, b), {"better": [], "worse": [], "undecided": []})[verdict].append(metric)
    found = [Ordering(label, a, b, tuple(v["better"]), tuple(v["worse"]), tuple(v["undecided"]))
             for (label, a, b), v in verdicts.items()]
    return found, len(tested)
