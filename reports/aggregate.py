"""Reduce the tidy frame to one statistic per table cell (mean, std, number of seeds).

A cell's rows are all rows sharing its key (dataset, backbone, method, J, variant):
- one row: its value as is (a published aggregate keeps its ``n_seeds`` and ``<metric>_std``);
- several rows: they must be single runs with distinct seeds; the cell is their mean and
  sample standard deviation (ddof = 1) over the seeds where the metric is not missing.

A cell whose runs gave one result (every per-image record of the trained model equal across its
seeds, ``reports.intervals``) is **deterministic**: its n counts distinct results (1) and it has no
std (the sanity metrics excepted: their re-initialised head is drawn from each seed).

With a confidence ``level`` (``report --ci``), every cell gets the one interval
``reports.intervals.cell_interval`` decides (the crossed seeds × images interval where every run
of the cell has per-image records of the metric, else Student t over seeds, labelled; over the
images only for a deterministic cell), clipped to the metric's range
(``reports.columns.METRIC_RANGES``) and marked; ``Stat.ci_note`` states its method and n.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.columns import KEY_COLUMNS, TIDY_COLUMNS, flatten, std_column
from reports.intervals import cell_interval, cell_is_deterministic, is_deterministic
from reports.layout import KeyValue, Layout

CellKey = tuple[KeyValue, ...]


@dataclass(frozen=True)
class Stat:
    """One cell's number: the mean over ``n`` distinct results (seeds; 1 for a ``deterministic``
    cell) and its standard deviation, if known; with a confidence level, its interval
    (``reports.intervals``) and ``ci_note``, the interval's method and n or why there is none."""

    mean: float
    std: float | None
    n: int
    ci: tuple[float, float] | None = None
    ci_clipped: bool = False  # the interval was clipped to the metric's range
    ci_note: str | None = None
    ci_missing: str | None = None  # without an interval, why in short ("n=1", "no spread", …)
    deterministic: bool = False


def describe_key(key: CellKey) -> str:
    """``cub/dinov2_vitb14/vmfproto/J=5/default`` for messages."""
    named = dict(zip(KEY_COLUMNS, key))
    return "/".join(f"J={v}" if k == "J" else str(v) for k, v in named.items())


def cell_stats(frame: pd.DataFrame, layout: Layout, *, level: float | None = None) -> dict[tuple[CellKey, str], Stat]:
    """The statistic of every (cell key, metric) of ``layout`` that ``frame`` has a value for
    (with intervals at confidence ``level`` when given)."""
    absent = [c for c in TIDY_COLUMNS if c not in frame.columns]
    if absent:
        raise ValueError(f"frame lacks tidy column(s) {absent}; build it with reports.load")
    groups: dict[CellKey, pd.DataFrame] = {
        tuple(key): rows for key, rows in frame.groupby(list(KEY_COLUMNS), sort=False)
    }
    stats: dict[tuple[CellKey, str], Stat] = {}
    for row in layout.rows:
        for group in layout.columns:
            key = layout.cell_key(row, group)
            rows = groups.get(key)
            if rows is None:
                continue
            _check_seeds(key, rows)
            deterministic = cell_is_deterministic(rows) if (rows["n_seeds"] == 1).all() else False
            for metric in group.metrics:
                stat = _summarize(rows, metric.key)
                if stat is not None and is_deterministic(deterministic, metric.key):
                    stat = replace(stat, n=1, std=None, deterministic=True)
                if stat is not None and level is not None:
                    stat = _with_intervals(stat, rows, metric.key, level)
                if stat is not None:
                    stats[(key, metric.key)] = stat
    return stats


def check_pools(frame: pd.DataFrame) -> None:
    """The pooling rule of every reader (``reports.load.load_runs``): the rows of one cell (one
    value of every key column) are one published aggregate, or single runs of distinct seeds
    that share every setting besides the seed (resolved hyperparameters included)."""
    for key, rows in frame.groupby(list(KEY_COLUMNS), sort=False, dropna=False):
        _check_seeds(tuple(key), rows)
        _check_settings(tuple(key), rows)


def _check_settings(key: CellKey, rows: pd.DataFrame) -> None:
    settings = rows["setting"].dropna().unique()
    if len(settings) < 2:
        return
    first, other = (flatten(json.loads(s)) for s in settings[:2])
    differ = ", ".join(f"{name} {first.get(name)!r} vs {other.get(name)!r}"
                       for name in sorted(set(first) | set(other)) if first.get(name) != other.get(name))
    sources = ", ".join(str(s) for s in rows["source"])
    raise ProtobenchError(
        f"Cell {describe_key(key)} has runs that differ in settings the table does not show ({differ}; "
        f"{sources}); pass one runs directory per setting, narrow with --where run_id=…, or give the runs "
        f"distinct variants."
    )


def _check_seeds(key: CellKey, rows: pd.DataFrame) -> None:
    if len(rows) == 1:
        return
    sources = ", ".join(str(s) for s in rows["source"])
    if (rows["n_seeds"] > 1).any():
        raise ProtobenchError(
            f"Cell {describe_key(key)} has a mean over seeds next to other rows ({sources}); "
            f"report a published aggregate and per-seed runs from separate inputs."
        )
    seeds = rows["seed"]
    if seeds.isna().any() or seeds.duplicated().any():
        raise ProtobenchError(
            f"Cell {describe_key(key)} has two results for the same seed ({sources}); they are copies "
            f"or differ only in settings the table does not show (e.g. method_args, map_pool, weights): "
            f"pass one runs directory per setting or give the runs distinct variants."
        )


def _summarize(rows: pd.DataFrame, metric: str) -> Stat | None:
    if len(rows) == 1:
        value = float(rows[metric].iloc[0])
        if math.isnan(value):
            return None
        std = float(rows[std_column(metric)].iloc[0])
        return Stat(mean=value, std=None if math.isnan(std) else std, n=int(rows["n_seeds"].iloc[0]))
    values = rows[metric].dropna()
    if values.empty:
        return None
    n = len(values)
    return Stat(mean=float(values.mean()), std=float(values.std(ddof=1)) if n > 1 else None, n=n)


def _with_intervals(stat: Stat, rows: pd.DataFrame, metric: str, level: float) -> Stat:
    if not (rows["n_seeds"] == 1).all():  # a published mean over seeds: no runs to draw an interval from
        return replace(stat, ci_note="a published mean: no interval", ci_missing="n=1" if stat.n < 2 else "published")
    got = cell_interval(rows, metric, level)
    return replace(stat, ci=got.ci, ci_clipped=got.clipped, ci_note=got.procedure, ci_missing=got.missing or None)
