"""A run's scores re-derived from its records, and a ``result.json`` its records contradict refused.

The rules are those the evaluation and the robustness stage score with (docs/protocol/metrics.md):

- from the ``per_image`` records: accuracy = 100 · mean over test images of [predicted = label];
  sta, dis, comp, sanity, sanity_signed = the mean over the images where the value is defined;
- from the ``per_prototype`` records: con = the mean over prototypes where it is defined;
- from the ``robustness`` records (the stage's subsample; benchmark/robustness/stage.py
  ``_summary``): ``acc_clean`` and ``acc_attacked`` = 100 · mean of ``correct_clean`` /
  ``correct_attacked``, every other score the mean of its defined per-image values (read with the
  per-image records, by test-split index: reports/per_image.py, once per command).

A recorded number further from its records' than :data:`RESCORE_TOLERANCE` (a robustness score:
than :data:`RELATIVE_TOLERANCE` × the mean magnitude of its per-image values) fails the run. A metric the result records
and no record table holds keeps its recorded number, and the run says so (``as_reported``): a run
evaluated before records existed, or a bundle made before bundles carried the robustness records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.errors import ProtobenchError
from benchmark.run.store import ROBUSTNESS_TABLE
from reports.columns import ROBUSTNESS_METRICS
from reports.per_image import FLAG_COLUMNS, PER_IMAGE_METRICS, RunValues, run_values

#: |result.json − records| above which a result is refused (percent; the records' float32 sums)
RESCORE_TOLERANCE = 1e-6
#: for a robustness score, the same relative to the mean |value| of its per-image values: those that
#: are not percentages (infidelity, pixel flipping's area) have no fixed scale, and the stage's and
#: this float64 mean of one set of values differ by rounding only (~n · 1e-16 of the mean |value|)
RELATIVE_TOLERANCE = 1e-9
PER_IMAGE_COLUMNS = {"sta": "sta", "dis": "dis", "comp": "comp", "sanity": "sanity", "sanity_signed": "sanity_signed"}
#: every metric the records re-score (and so every one a result.json is checked on)
RESCORED = ("acc", "con", *PER_IMAGE_COLUMNS, *ROBUSTNESS_METRICS)


@dataclass(frozen=True)
class Rescored:
    """What a run's records say: the metrics they re-score, the test images of its per-image
    records (None: none), whether it has per-image records, and the metrics it records that no
    record table holds (kept as reported)."""

    scores: dict[str, float]
    images: int | None
    records: bool
    as_reported: tuple[str, ...]


def _records(run_dir: str, table: str) -> pd.DataFrame | None:
    from benchmark.run.records import read_records

    return read_records(Path(run_dir), table)


def _defined_mean(values: np.ndarray) -> float:
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


def _robustness_values(run_dir: str, images: RunValues | None) -> dict[str, np.ndarray]:
    """Each robustness score's per-image values (accuracies in percent; NaN where undefined): from
    the run's per-image values, which hold them by test-split index (read once per command), else,
    for a run without per-image records, from its robustness records; none where it has none."""
    columns = {metric: PER_IMAGE_METRICS[metric] for metric in ROBUSTNESS_METRICS}
    if images is not None:
        return {metric: images.values(column) for metric, column in columns.items() if column in images.columns}
    table = _records(run_dir, ROBUSTNESS_TABLE)
    if table is None:
        return {}
    return {metric: (100.0 if column in FLAG_COLUMNS else 1.0) * table[column].to_numpy(dtype=np.float64)
            for metric, column in columns.items() if column in table.columns}


def rescore(run_dir: str, recorded: dict[str, float], where: str) -> Rescored:
    """The run's metrics of :data:`RESCORED` from its records (the module); a recorded number the
    records contradict is refused, naming ``where``."""
    images = run_values(run_dir)  # read once per command: the ranking's paired tests draw on the same values
    scores: dict[str, float] = {}
    if images is not None:
        right = images.values("correct") == 100.0  # label == predicted: read_records checked `correct` against it
        scores["acc"] = 100.0 * float(right.mean()) if len(right) else math.nan
        scores.update({metric: _defined_mean(images.values(column)) for metric, column in PER_IMAGE_COLUMNS.items()
                       if column in images.columns})
    prototypes = _records(run_dir, "per_prototype")
    if prototypes is not None and "con" in prototypes.columns:
        scores["con"] = _defined_mean(prototypes["con"].to_numpy(dtype=np.float64))
    robust = _robustness_values(run_dir, images)
    scores.update({metric: _defined_mean(values) for metric, values in robust.items()})
    tolerances = {metric: RELATIVE_TOLERANCE * _defined_mean(np.abs(values)) for metric, values in robust.items()}
    for metric, value in scores.items():
        claimed = recorded.get(metric, math.nan)
        both_missing = math.isnan(value) and math.isnan(claimed)
        if not both_missing and not (abs(value - claimed) <= tolerances.get(metric, RESCORE_TOLERANCE)):
            raise ProtobenchError(f"{where}: result.json gives {metric} = {claimed!r} but its records give {value!r}; "
                                  "the result and its records disagree (altered, or written by different runs): "
                                  "the source is refused")
    as_reported = tuple(m for m in RESCORED if m not in scores and math.isfinite(recorded.get(m, math.nan)))
    return Rescored(scores, None if images is None else len(images.ids), images is not None, as_reported)
