"""Published-number and exported CSVs → the tidy frame: a paper's numbers (``reports/paper/``), a
table the suite wrote (``report --format csv``) or the rows ``export`` wrote, each cell checked
against its column (reports/load.py's :func:`~reports.load.load_runs` reads CSV inputs here)."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.columns import (
    FLOAT_COLUMNS,
    KEY_COLUMNS,
    METRIC_RANGES,
    METRIC_COLUMNS,
    TIDY_COLUMNS,
    TIDY_PREFIX,
)
from reports.result_record import Record, result_record, tidy


def load_csv(path: str | Path) -> pd.DataFrame:
    """Load a CSV of published (or exported) numbers into the tidy frame.

    Required columns: dataset, backbone, method, J, variant and at least one metric column.
    Optional: seed, n_seeds (default 1), ``<metric>_std`` and any other tidy column; any
    other column name is rejected so that a typo does not silently drop a metric.
    """
    path = Path(path)
    if not path.is_file():
        raise ProtobenchError(
            f"CSV {path} does not exist; pass a published-numbers CSV such as "
            f"reports/paper/cub_main.csv."
        )
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ProtobenchError(f"CSV {path} cannot be parsed ({exc}); fix the file.") from exc
    raw.columns = [str(c).strip() for c in raw.columns]
    if EXPORT_MARKER in raw.columns:
        return tidy(_export_records(path, raw))
    if any(c.startswith(TIDY_PREFIX) for c in raw.columns):
        return tidy(_table_records(path, raw))
    _check_csv_columns(path, list(raw.columns))
    records = [
        _csv_record(path, line, row)
        for line, row in zip(range(2, len(raw) + 2), raw.to_dict(orient="records"))
    ]
    return tidy(records)


EXPORT_MARKER = "spec.method"
_EXPORT_INTEGERS = ("spec.prototypes_per_class", "spec.seed")
#: sections whose scalars name a run's setting (the pooling rule compares them): read back typed
_EXPORT_SCALAR_SECTIONS = ("spec.", "method_hyperparameters.")


def _export_records(path: Path, raw: pd.DataFrame) -> list[Record]:
    records = []
    for line, row in zip(range(2, len(raw) + 2), raw.to_dict(orient="records")):
        where = f"{path}:{line}"
        nested: dict[str, object] = {}
        for column, cell in row.items():
            value = _export_cell(where, column, cell.strip())
            *parents, leaf = column.split(".")
            node = nested
            for parent in parents:
                node = node.setdefault(parent, {})  # type: ignore[assignment]
            node[leaf] = value  # type: ignore[index]
        records.append(result_record(where, nested, run_dir=row.get("run_dir") or None))
    return records


def _csv_scalar(text: str) -> object:
    """A scalar as pandas wrote it: ``True``/``False``, an integer, a float, else the text."""
    if text in ("True", "False"):
        return text == "True"
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def _export_cell(where: str, column: str, text: str) -> object:
    """One cell of an export CSV as result.json held it: numbers where the tidy frame reads
    numbers, JSON text of lists and mappings decoded, any other text as is (a version "2.0"
    stays a string)."""
    if not text:  # RunSpec's text fields have no None ("" is their empty value)
        return "" if column.startswith("spec.") and column.count(".") == 1 else None
    if column.startswith(("metrics.", "timing.")):
        return _csv_float(where, column, text)
    if column in _EXPORT_INTEGERS:
        return _csv_integer(where, column, text)
    if column.startswith(_EXPORT_SCALAR_SECTIONS):
        return _csv_scalar(text)
    if text[0] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def _table_records(path: Path, raw: pd.DataFrame) -> list[Record]:
    """The cells of a ``report --format csv`` table (reports.csvtable): its ``tidy.[<g>.]<column>``
    columns, one published aggregate per column group and line; the display columns are for people."""
    groups: dict[str, dict[str, str]] = {}
    for column in raw.columns:
        if column.startswith(TIDY_PREFIX):
            group, _, name = column.removeprefix(TIDY_PREFIX).rpartition(".")
            groups.setdefault(group, {})[column] = name
    records = []
    for renamed in groups.values():
        _check_csv_columns(path, list(renamed.values()))
        cells = raw[list(renamed)].rename(columns=renamed)
        for line, row in zip(range(2, len(raw) + 2), cells.to_dict(orient="records")):
            if any(row[column].strip() for column in KEY_COLUMNS):  # empty: the row has no value there
                records.append(_csv_record(path, line, row))
    return records


def _check_csv_columns(path: Path, columns: list[str]) -> None:
    unknown = [c for c in columns if c not in TIDY_COLUMNS]
    if unknown:
        rendered = not any(c in KEY_COLUMNS for c in columns)  # a report --format csv table without tidy. columns
        raise ProtobenchError(
            f"CSV {path} has unknown column(s) {', '.join(unknown)}; allowed columns are "
            f"{', '.join(TIDY_COLUMNS)}."
            + (" A `report --format csv` table reads back through its tidy. columns, which it lacks where "
               "a cell's metrics average different numbers of seeds: report the runs, or their "
               "`protobench export` CSV." if rendered else "")
        )
    missing = [c for c in KEY_COLUMNS if c not in columns]
    if missing:
        raise ProtobenchError(
            f"CSV {path} lacks required column(s) {', '.join(missing)}; it needs "
            f"{', '.join(KEY_COLUMNS)} and at least one metric column ({', '.join(METRIC_COLUMNS)})."
        )
    if not any(c in METRIC_COLUMNS for c in columns):
        raise ProtobenchError(
            f"CSV {path} has no metric column; add at least one of {', '.join(METRIC_COLUMNS)}."
        )


def _csv_record(path: Path, line: int, row: Mapping[str, str]) -> Record:
    where = f"CSV {path} line {line}"
    cells = {column: value.strip() for column, value in row.items()}
    for column in KEY_COLUMNS:
        if not cells[column]:
            raise ProtobenchError(f"{where}: column {column} is empty; every row needs a value.")
    seed = _csv_integer(where, "seed", cells.get("seed", ""))
    n_seeds = _csv_integer(where, "n_seeds", cells.get("n_seeds", ""))
    n_seeds = 1 if n_seeds is None else n_seeds
    if n_seeds < 1:
        raise ProtobenchError(f"{where}: n_seeds must be a positive integer, got {n_seeds}.")
    if n_seeds > 1 and seed is not None:
        raise ProtobenchError(
            f"{where}: a row with n_seeds = {n_seeds} is a mean over seeds; leave its seed empty."
        )
    record: Record = {column: value or None for column, value in cells.items()}
    record.update(
        {
            "J": _csv_integer(where, "J", cells["J"]),
            "seed": seed,
            "n_seeds": n_seeds,
            "source": f"{path}:{line}",
        }
    )
    record.update({column: _csv_float(where, column, cells.get(column, "")) for column in FLOAT_COLUMNS})
    return record


def _csv_integer(where: str, column: str, value: str) -> int | None:
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ProtobenchError(f"{where}: {column} must be an integer, got {value!r}.") from None


def _csv_float(where: str, column: str, value: str) -> float:
    """A metric cell: empty (not computed) or a finite number within the metric's range
    (:data:`reports.columns.METRIC_RANGES`; an export's ``metrics.acc`` is ``acc``'s)."""
    if not value:
        return math.nan
    try:
        number = float(value)
    except ValueError:
        raise ProtobenchError(f"{where}: {column} must be a number or empty, got {value!r}.") from None
    low, high = METRIC_RANGES.get(column.rpartition(".")[2], (-math.inf, math.inf))
    if not (math.isfinite(number) and low <= number <= high):  # NaN, ±inf, 1e999 and a 5000-digit numeral too
        shown = value if len(value) <= 40 else f"{value[:20]}…({len(value)} characters)"
        span = f"[{low:g}, {high:g}]" if math.isfinite(high) else f"≥ {low:g}"
        raise ProtobenchError(f"{where}: column {column} = {shown} is not a finite number in {span}; fix that cell "
                              "(leave it empty where the metric was not computed).")
    return number
