"""Significance-aware marks (``report --significance``): per column, the best cell is tested
against every other cell, paired on seed (and, for a metric with per-image records, on test
image, by id: ``reports.paired.cell_difference``), Holm-corrected within the column.

- the best cell is bold only where it is significantly better than the runner-up;
- every cell whose difference from the best is not significant (Holm p ≥ alpha), or cannot be
  tested (no common seed, a published mean, fewer seeds than a test needs), is "tied" with it,
  and so is the best when its runner-up is.
"""
from __future__ import annotations

import math

import pandas as pd

from reports.aggregate import CellKey
from reports.columns import KEY_COLUMNS
from reports.marks import Mark
from reports.paired import cell_difference
from reports.stats import holm



def significance_marks(frame: pd.DataFrame, keys: list[CellKey], means: list[float | None], metric: str, *,
                       higher_is_better: bool, alpha: float) -> list[Mark]:
    """The marks of one column: ``keys`` and ``means`` per row (None: missing cell)."""
    present = [i for i, m in enumerate(means) if m is not None]
    if len(present) < 2:
        return [None] * len(means)  # no runner-up: nothing to test
    sign = 1.0 if higher_is_better else -1.0
    order = sorted(present, key=lambda i: -sign * means[i])
    best = order[0]
    groups = {tuple(k): rows for k, rows in frame.groupby(list(KEY_COLUMNS), sort=False)}
    best_runs = _runs(groups.get(keys[best]))
    p_values = []
    for i in order[1:]:
        other = _runs(groups.get(keys[i]))
        paired = None if best_runs is None or other is None else cell_difference(best_runs, other, metric, 1 - alpha)
        p_values.append(math.nan if paired is None else paired.p_value)
    adjusted = holm(p_values)
    tied = {i for i, p in zip(order[1:], adjusted) if math.isnan(p) or p >= alpha}
    marks: list[Mark] = [None] * len(means)
    for i in tied:
        marks[i] = "tied"
    marks[best] = "tied" if order[1] in tied else "best"
    return marks


def _runs(rows: pd.DataFrame | None) -> pd.DataFrame | None:
    """A cell's single runs indexed by seed, or None for a published mean or a missing cell."""
    if rows is None or (rows["n_seeds"] > 1).any() or rows["seed"].isna().any():
        return None
    return rows.set_index("seed")
