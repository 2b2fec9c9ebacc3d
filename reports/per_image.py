"""A cell's per-image values, seeds × test images, keyed by image id (the image's path below the
dataset root, ``benchmark.run.records``), for the crossed-design statistics (``reports.stats``).

Runs are aligned by image id, never by row position: the same images in another order pair
correctly, and runs whose image sets differ are refused naming them (a different test split, a
subset, a renamed dataset) instead of being mis-paired.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.errors import ProtobenchError

#: the metrics whose per-image parts the records hold (``correct`` for accuracy), percent
PER_IMAGE_METRICS: dict[str, str] = {"acc": "correct", "sta": "sta", "dis": "dis", "comp": "comp", "sanity": "sanity",
                                   "sanity_signed": "sanity_signed"}


def seed_values(rows: pd.DataFrame, metric: str) -> pd.DataFrame | None:
    """Per seed (index) and image id (columns, the first run's order), the per-image value of
    ``metric`` in percent (NaN where undefined) of a cell's single runs; None when the metric has
    no per-image part or a run has no records with it (a published number, a run evaluated
    before records existed). Runs whose image sets differ are refused."""
    column = PER_IMAGE_METRICS.get(metric)
    if column is None:
        return None
    values: dict[int, pd.Series] = {}
    for seed, run_dir in zip(rows["seed"], rows["run_dir"]):
        records = run_records(run_dir) if isinstance(run_dir, str) else None
        if records is None or column not in records.columns:
            return None
        ids = records["image"].astype(str)
        if ids.duplicated().any():
            raise ProtobenchError(f"{run_dir}: its per-image records list image {ids[ids.duplicated()].iloc[0]!r} "
                                  "twice; run `protobench evaluate RUN_DIR` to write them again.")
        scale = 100.0 if column == "correct" else 1.0
        values[int(seed)] = pd.Series(scale * records[column].astype(np.float64).to_numpy(), index=ids.to_numpy())
    runs = dict(zip(rows["seed"].astype(int), rows["run_dir"].astype(str)))
    return _aligned(values, runs)


def run_records(run_dir: str) -> pd.DataFrame | None:
    """The run's per-image records (``benchmark.run.records.read_records``: checked against their
    schema), read once per version of its files: a table with several metric columns compares
    every metric of every cell, and each comparison needs the same runs' records. The files'
    identity (inode, size, modification time) keys the cache, so a rewritten file is read again."""
    from benchmark.run.store import RECORD_SUFFIXES, RESULT_FILE

    files = [Path(run_dir) / name for name in (RESULT_FILE, *(f"per_image{s}" for s in RECORD_SUFFIXES))]
    stamps = tuple((f.name, st.st_ino, st.st_size, st.st_mtime_ns) for f in files if (st := _stat(f)) is not None)
    return _read_records(run_dir, stamps)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


@lru_cache(maxsize=256)  # a cell's runs and those it is compared with, about 1 MB each on CUB's test split
def _read_records(run_dir: str, stamps: tuple) -> pd.DataFrame | None:
    from benchmark.run.records import read_records

    return read_records(run_dir)


def _aligned(values: dict[int, pd.Series], runs: dict[int, str]) -> pd.DataFrame:
    first = next(iter(values))
    order = values[first].index
    for seed, series in values.items():
        if not series.index.equals(order) and set(series.index) != set(order):  # same order: no set needed
            raise mismatch(runs[first], runs[seed], set(order), set(series.index))
    return pd.DataFrame({seed: series.reindex(order) for seed, series in values.items()}).T


def paired(a: pd.DataFrame, b: pd.DataFrame, runs_a: str, runs_b: str) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` (seeds × image ids, the same seeds in the same order) as arrays with ``b``'s
    images in ``a``'s order; differing image sets are refused naming the runs."""
    if not a.columns.equals(b.columns) and set(a.columns) != set(b.columns):
        raise mismatch(runs_a, runs_b, set(a.columns), set(b.columns))
    return a.to_numpy(), b[a.columns].to_numpy()


def mismatch(first: str, other: str, first_ids: set, other_ids: set) -> ProtobenchError:
    only_first, only_other = sorted(first_ids - other_ids), sorted(other_ids - first_ids)
    example = (f"{len(only_first)} only in the first (e.g. {only_first[0]!r})" if only_first else "") + \
              (", " if only_first and only_other else "") + \
              (f"{len(only_other)} only in the second (e.g. {only_other[0]!r})" if only_other else "")
    return ProtobenchError(f"The per-image records of {first} and {other} hold different test images ({example}); "
                           "paired statistics need the same test split: compare runs of one dataset split.")
