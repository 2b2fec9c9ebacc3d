"""One finished run's ``result.json`` → one row of the tidy frame (``reports.columns.TIDY_COLUMNS``),
each field checked: a missing or mistyped field, or a metric out of its range, is one error
naming the file and the field (reports/load.py reads result folders with it, reports/csv_input.py
exported rows)."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from benchmark.errors import ProtobenchError
from benchmark.spec_fields import identity_fields
from reports.columns import (
    FLOAT_COLUMNS,
    INTEGER_COLUMNS,
    METRIC_RANGES,
    PROVENANCE_COLUMNS,
    ROBUSTNESS_METRICS,
    TIDY_COLUMNS,
)
from reports.layouts import display_name

_RESULT_METRICS = ("acc", "con", "sta", "dis", "comp", "purity", "loc", "size_local", "size_global", "del", "sanity",
                   "sanity_signed", "class_indep", "contrastive", "sid5", "pointing")
_TIMING_METRICS = ("epoch_seconds", "epoch_seconds_live_trunk", "inference_images_per_second")

Record = dict[str, object]


def tidy(records: list[Record]) -> pd.DataFrame:
    """The tidy frame of ``records``: exactly TIDY_COLUMNS, integer and float columns typed."""
    frame = pd.DataFrame.from_records(records, columns=list(TIDY_COLUMNS))
    for column in INTEGER_COLUMNS:
        frame[column] = frame[column].astype("Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = frame[column].astype("float64")
    return frame


# --- result.json -------------------------------------------------------------------------


def malformed(path: Path | str, problem: str) -> ProtobenchError:
    """The one error of a result file that cannot be read as a run's result."""
    return ProtobenchError(
        f"{path} is malformed: {problem}; re-run that run or delete the file "
        f"(the run then counts as unfinished)."
    )


def result_record(path: Path | str, data: Mapping[str, object], *, run_dir: str | None) -> Record:
    """The tidy record of one result (``path`` names it in errors and in the source column)."""
    spec = _section(path, data, "spec", required=True)
    metrics = _section(path, data, "metrics", required=True)
    timing = _section(path, data, "timing", required=False)
    provenance = _section(path, data, "provenance", required=False)
    record: Record = {
        "dataset": _text(path, spec, "spec", "dataset"),
        "backbone": _text(path, spec, "spec", "backbone"),
        "method": _text(path, spec, "spec", "method"),
        "J": _integer(path, spec, "spec", "prototypes_per_class"),
        "variant": _text(path, spec, "spec", "variant"),
        "seed": _integer(path, spec, "spec", "seed"),
        "n_seeds": 1,
        "run_id": _text(path, data, "", "run_id"),
        "grid": data.get("grid"),
        "run_dir": run_dir,
        "source": str(path),
        "method_display_name": display_name(str(spec.get("method")),
                                            _optional_text(path, data, "method_display_name")),
        "setting": _setting(data, spec),
        "stale": None,  # filled by the command that shows the frame, which may import the methods
    }
    record.update({m: _number(path, metrics, "metrics", m) for m in _RESULT_METRICS})
    robustness = _section(path, data, "robustness", required=False)  # benchmark/robustness/stage.py
    scores = _section(path, robustness, "metrics", required=False)
    record.update({m: _number(path, scores, "robustness.metrics", m) for m in ROBUSTNESS_METRICS})
    record.update({m: _number(path, timing, "timing", m) for m in _TIMING_METRICS})
    record.update({k: _provenance_text(provenance.get(k)) for k in PROVENANCE_COLUMNS})
    return record


def _setting(data: Mapping[str, object], spec: Mapping[str, object]) -> str:
    """The run's resolved configuration but the seed, as canonical JSON: what its cell's other
    runs must share (the hyperparameters it ran with where recorded, else those it declared)."""
    setting = identity_fields(dict(spec))
    setting.pop("seed", None)
    resolved = data.get("method_hyperparameters")
    if isinstance(resolved, dict):
        setting["method_args"] = resolved
    return json.dumps(setting, sort_keys=True, default=str)


def _provenance_text(value: object) -> str | None:
    """Provenance as one string per column: text as is, structures (packages, fingerprints) as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _section(path: Path | str, data: Mapping[str, object], name: str, *, required: bool) -> Mapping[str, object]:
    value = data.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise malformed(path, f"'{name}' must be a JSON object")
    return value


def _field(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def _text(path: Path | str, data: Mapping[str, object], section: str, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise malformed(path, f"{_field(section, key)} must be a non-empty string, got {value!r}")
    return value


def _optional_text(path: Path | str, data: Mapping[str, object], key: str) -> str | None:
    value = data.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise malformed(path, f"{key} must be a non-empty string or absent, got {value!r}")
    return value


def _integer(path: Path | str, data: Mapping[str, object], section: str, key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise malformed(path, f"{_field(section, key)} must be an integer, got {value!r}")
    return value


def _number(path: Path | str, data: Mapping[str, object], section: str, key: str) -> float:
    value = data.get(key)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise malformed(path, f"{_field(section, key)} must be a number or null, got {value!r}")
    low, high = METRIC_RANGES.get(key, (-math.inf, math.inf)) if section == "metrics" else (-math.inf, math.inf)
    if not (math.isfinite(value) and low <= value <= high):  # 1e999 parses as inf: never a table cell or a plot
        span = f" in [{low:g}, {high:g}]" if math.isfinite(high) else ""
        raise malformed(path, f"{_field(section, key)} = {value!r} is not a finite number{span}")
    return float(value)


# --- CSV ---------------------------------------------------------------------------------

#: a column every ``protobench export`` CSV has and no tidy CSV has: such a file is read as the
#: result.json files it flattened (reports.export.flatten), so ``report runs.csv`` equals ``report runs/``
