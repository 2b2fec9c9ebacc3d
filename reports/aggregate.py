"""Reduce the tidy frame to one statistic per table cell (mean, std, number of seeds).

A cell's rows are all rows sharing its key (dataset, backbone, method, J, variant):
- one row: its value as is (a published aggregate keeps its ``n_seeds`` and ``<metric>_std``);
- several rows: they must be single runs with distinct seeds; the cell is their mean and
  sample standard deviation (ddof = 1) over the seeds where the metric is not missing.

With a confidence ``level`` (``report --ci``), a cell of n ≥ 2 seeds also gets its Student t
interval over the seeds, and an accuracy cell whose runs all have per-image records its interval
over the crossed seeds × test images (``reports.stats.crossed_mean``: the procedure ``compare``
uses for differences, images aligned by id); intervals are clipped to the metric's range
(``reports.columns.METRIC_RANGES``) and marked.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.columns import KEY_COLUMNS, METRIC_RANGES, TIDY_COLUMNS, flatten, std_column
from reports.layout import KeyValue, Layout

CellKey = tuple[KeyValue, ...]


@dataclass(frozen=True)
class Stat:
    """One cell's number: the mean over ``n`` seeds and its standard deviation, if known; with a
    confidence level, its interval over seeds (n ≥ 2) and, for accuracy, over seeds × test images."""

    mean: float
    std: float | None
    n: int
    ci: tuple[float, float] | None = None
    image_ci: tuple[float, float] | None = None
    ci_clipped: bool = False  # the interval over seeds was clipped to the metric's range
    image_ci_clipped: bool = False
    image_note: str | None = None  # the image interval's procedure and n, or why there is none
    image_n: tuple[int, int] | None = None  # (seeds, images) behind the image interval
    ci_note: str | None = None  # why a cell of several seeds has no seed interval (every seed equal)


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
            for metric in group.metrics:
                stat = _summarize(rows, metric.key)
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
    from reports.per_image import seed_values
    from reports.stats import image_accuracy, seed_interval

    values = rows[metric].dropna()
    single_runs = (rows["n_seeds"] == 1).all()
    seed = seed_interval(values.tolist(), level, METRIC_RANGES[metric]) if single_runs else None
    ci, ci_clipped = seed if seed is not None else (None, False)
    ci_note = "no spread" if single_runs and seed is None and len(values) >= 2 else None
    stat = replace(stat, ci=ci, ci_clipped=ci_clipped, ci_note=ci_note)
    if metric != "acc" or not single_runs:
        return stat
    correct = seed_values(rows, metric)
    if correct is None:
        return stat
    image = image_accuracy(correct.to_numpy() / 100.0, level)
    if not image.has_interval:
        return replace(stat, image_note=image.test)
    return replace(stat, image_ci=image.ci, image_ci_clipped=image.clipped, image_note=image.test,
                   image_n=(image.n_seeds, image.n_images))
