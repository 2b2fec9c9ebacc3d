"""A cell's per-image values, seeds × test images, keyed by image id (the image's path below the
dataset root, ``benchmark.run.records``), for the crossed-design statistics (``reports.stats``).

Runs are aligned by image id, never by row position: the same images in another order pair
correctly, and runs whose image sets differ are refused naming them (a different test split, a
subset, a renamed dataset) instead of being mis-paired.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.errors import ProtobenchError

#: the metrics whose per-image parts the records hold (``correct`` for accuracy), percent
PER_IMAGE_METRICS: dict[str, str] = {"acc": "correct", "sta": "sta", "dis": "dis", "comp": "comp", "sanity": "sanity",
                                   "sanity_signed": "sanity_signed",
                                   # the robustness stage's records, on its subsample (NaN on the other images)
                                   "acc_clean": "correct_clean", "acc_attacked": "correct_attacked", "pac": "pac",
                                   "prc": "prc", "plc": "plc", "pixel_flipping": "pixel_flipping",
                                   "region_perturbation": "region_perturbation", "road": "road",
                                   "infidelity": "infidelity"}
#: the columns held as flags (True / 1.0 per image), in percent
FLAG_COLUMNS = ("correct", "correct_clean", "correct_attacked")


@dataclass(frozen=True)
class RunValues:
    """One run's per-image values, all a reader keeps of its records: the image ids (unique; one
    shared Index for runs with the same ids in the same order) and each per-image column of
    :data:`PER_IMAGE_METRICS` in percent (``correct`` × 100), float32 where that is exact (the
    records the evaluation writes), else float64: about 116 KB per run of CUB's 5,794 test images,
    where the record table (image paths, labels, margins) takes about 1 MB."""

    ids: pd.Index
    columns: dict[str, np.ndarray]

    def values(self, column: str) -> np.ndarray:
        return self.columns[column].astype(np.float64)


def seed_values(rows: pd.DataFrame, metric: str) -> pd.DataFrame | None:
    """Per seed (index) and image id (columns, the first run's order), the per-image value of
    ``metric`` in percent (NaN where undefined) of a cell's single runs (``rows``: their ``seed``
    and ``run_dir``); None when the metric has no per-image part or a run has no records with it
    (a published number, a run evaluated before records existed). Runs whose image sets differ
    are refused."""
    return seed_table(rows["seed"].tolist(), rows["run_dir"].tolist(), metric)


def seed_table(seeds: list, run_dirs: list, metric: str) -> pd.DataFrame | None:
    """:func:`seed_values` of the runs ``run_dirs`` of ``seeds``."""
    column = PER_IMAGE_METRICS.get(metric)
    if column is None:
        return None
    found: dict[int, RunValues] = {}
    for seed, run_dir in zip(seeds, run_dirs):
        got = run_values(run_dir) if isinstance(run_dir, str) else None
        if got is None or column not in got.columns:
            return None
        found[int(seed)] = got
    runs = dict(zip(map(int, seeds), map(str, run_dirs)))
    first = next(iter(found))
    order = found[first].ids
    table = np.empty((len(found), len(order)))
    for row, (seed, got) in enumerate(found.items()):
        if got.ids is order or got.ids.equals(order):
            table[row] = got.values(column)
        elif set(got.ids) != set(order):
            raise mismatch(runs[first], runs[seed], set(order), set(got.ids))
        else:  # the same images in another order: aligned by id
            table[row] = pd.Series(got.values(column), index=got.ids).reindex(order).to_numpy()
    return pd.DataFrame(table, index=pd.Index(list(found)), columns=order)


def run_values(run_dir: str) -> RunValues | None:
    """The run's per-image values (:class:`RunValues`) from its records
    (``benchmark.run.records.read_records``: checked against their schema), read once per version
    of its files: every table, comparison and page of a command draws on them. The files' identity
    (inode, size, modification time) keys the cache, so a rewritten file is read again; None where
    the run has no records."""
    stamps = _stamps(run_dir)
    cached = _VALUES.get(run_dir)
    if cached is not None and cached[0] == stamps:
        return cached[1]
    from benchmark.run.records import read_records

    values = _values_of(run_dir, _with_robustness(Path(run_dir), read_records(Path(run_dir))))
    _VALUES[run_dir] = (stamps, values)
    return values


def read_run_records(run_dir: str) -> pd.DataFrame | None:
    """The run's whole per-image records, for a page that shows them (the site's run page); the
    same read gives :func:`run_values` its values, so a site reads each run's records once."""
    from benchmark.run.records import read_records

    stamps = _stamps(run_dir)
    records = read_records(Path(run_dir))
    if records is None or not records["image"].astype(str).duplicated().any():  # else: refused where tested
        _VALUES[run_dir] = (stamps, _values_of(run_dir, records))
    return records


_VALUES: dict[str, tuple[tuple, RunValues | None]] = {}  # run folder → (its files' stamps, values)
_SHARED_IDS: dict[tuple, pd.Index] = {}  # the image-id orders read (one per test split), by length and ends


def _stamps(run_dir: str) -> tuple:
    from benchmark.run.store import RECORD_SUFFIXES, RESULT_FILE, ROBUSTNESS_TABLE

    files = [Path(run_dir) / name for name in (RESULT_FILE, *(f"{table}{s}" for table in ("per_image", ROBUSTNESS_TABLE)
                                                              for s in RECORD_SUFFIXES))]
    return tuple((f.name, st.st_ino, st.st_size, st.st_mtime_ns) for f in files if (st := _stat(f)) is not None)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _with_robustness(run_dir: Path, records: pd.DataFrame | None) -> pd.DataFrame | None:
    """The per-image records with the robustness stage's columns beside them (by test-split index;
    NaN on the images outside its subsample), where the run has both tables."""
    from benchmark.run.records import read_records
    from benchmark.run.store import ROBUSTNESS_TABLE

    robust = read_records(run_dir, ROBUSTNESS_TABLE) if records is not None else None
    if robust is None:
        return records
    scored = robust.drop(columns=["image"]).set_index("index").reindex(records["index"].to_numpy())
    return pd.concat([records.reset_index(drop=True), scored.reset_index(drop=True).astype(np.float64)], axis=1)


def _values_of(run_dir: str, records: pd.DataFrame | None) -> RunValues | None:
    """The :class:`RunValues` of a run's records; a run listing an image twice is refused."""
    if records is None:
        return None
    ids = records["image"].astype(str)
    if ids.duplicated().any():
        raise ProtobenchError(f"{run_dir}: its per-image records list image {ids[ids.duplicated()].iloc[0]!r} "
                              "twice; run `protobench evaluate RUN_DIR` to write them again.")
    read = pd.Index(ids.to_numpy())
    key = (len(read), read[0], read[-1]) if len(read) else ()
    index = _SHARED_IDS.get(key)
    if index is None or not index.equals(read):
        index = _SHARED_IDS[key] = read
    columns = {}
    for column in PER_IMAGE_METRICS.values():
        if column in records.columns:
            scale = 100.0 if column in FLAG_COLUMNS else 1.0
            exact = scale * records[column].astype(np.float64).to_numpy()
            narrow = exact.astype(np.float32)
            columns[column] = narrow if np.array_equal(narrow.astype(np.float64), exact, equal_nan=True) else exact
    return RunValues(index, columns)


def paired(a: pd.DataFrame, b: pd.DataFrame, runs_a: str, runs_b: str) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` (seeds × image ids, the same seeds in the same order) as arrays with ``b``'s
    images in ``a``'s order; differing image sets are refused naming the runs."""
    if a.columns.equals(b.columns):
        return a.to_numpy(), b.to_numpy()
    if set(a.columns) != set(b.columns):
        raise mismatch(runs_a, runs_b, set(a.columns), set(b.columns))
    return a.to_numpy(), b[a.columns].to_numpy()


def mismatch(first: str, other: str, first_ids: set, other_ids: set) -> ProtobenchError:
    only_first, only_other = sorted(first_ids - other_ids), sorted(other_ids - first_ids)
    example = (f"{len(only_first)} only in the first (e.g. {only_first[0]!r})" if only_first else "") + \
              (", " if only_first and only_other else "") + \
              (f"{len(only_other)} only in the second (e.g. {only_other[0]!r})" if only_other else "")
    return ProtobenchError(f"The per-image records of {first} and {other} hold different test images ({example}); "
                           "paired statistics need the same test split: compare runs of one dataset split.")
