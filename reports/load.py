"""Read finished runs (``result.json``) and published-number CSVs into the tidy frame.

Both readers return a frame with exactly ``reports.columns.TIDY_COLUMNS``. A run row has
``n_seeds = 1`` and its seed; a CSV row may stand for an aggregate (``n_seeds > 1``,
no seed, optional ``<metric>_std`` columns), as the paper's five-seed means do.
"""
from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from benchmark.errors import ProtobenchError
from benchmark.run.store import UnreadableRunFile, load_json
from benchmark.spec_fields import TUNING_DIR_SUFFIX, identity_fields
from reports.columns import (
    FLOAT_COLUMNS,
    INTEGER_COLUMNS,
    KEY_COLUMNS,
    METRIC_RANGES,
    METRIC_COLUMNS,
    PROVENANCE_COLUMNS,
    TIDY_COLUMNS,
    TIDY_PREFIX,
)
from reports.layouts import display_name

RESULT_FILE = "result.json"
_RESULT_METRICS = ("acc", "con", "sta", "dis", "comp", "purity", "loc", "size_local", "size_global", "del", "sanity",
                   "class_indep", "contrastive", "sid5", "pointing")
_TIMING_METRICS = ("epoch_seconds", "epoch_seconds_live_trunk", "inference_images_per_second")

Record = dict[str, object]


def load_runs(inputs: Iterable[str | Path], where: Mapping[str, Sequence[str]] | None = None, *,
              csv: bool = True, required: bool = True) -> pd.DataFrame:
    """The one loader of ``report``, ``plot`` and ``export``: the tidy frame of the result folders
    (and, with ``csv``, the published-number CSVs) among ``inputs``, filtered by ``where``
    (``--where``), that every reader pools by one rule (:func:`reports.aggregate.check_pools`:
    a cell holds distinct seeds of one setting, or one aggregate). Stale results stay in, with
    their reason in the ``stale`` column (:func:`stale_note`). ``required=False``: folders without
    a result give an empty frame (``report --tuning`` of studies whose grid has not run yet)."""
    from reports.aggregate import check_pools
    from reports.pivot import filter_frame

    paths = [Path(p) for p in inputs]
    if not paths:
        raise ProtobenchError("Give at least one RUNS_DIR holding finished runs (for example runs/).")
    csvs = [p for p in paths if csv and p.suffix == ".csv" and p.is_file()]
    dirs = [p for p in paths if p not in csvs]
    frames = [load_csv(p) for p in csvs] + ([load_results(dirs, required=required)] if dirs else [])
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    frame = filter_frame(frame, where) if where else frame
    check_pools(frame)
    return frame


#: the first word of a ``stale`` reason whose own adapter code was not checked
#: (benchmark.run.own_code.UNVERIFIABLE): such a result is not advised for retraining
UNVERIFIABLE = "unverifiable"


def stale_note(runs: Iterable[tuple[str, object]], notes: Mapping[str, str] | None = None) -> str | None:
    """The stale results among ``runs`` (run directory, ``stale`` column), one line each with
    why, apart from them the unverifiable ones (own adapters whose code was not imported), and the
    current ones whose code was refactored since (``notes``: run directory → note, one line per
    note with its count), for stderr; None when there is none."""
    runs = list(runs)
    flagged = [(run_dir, why) for run_dir, why in runs if isinstance(why, str)]
    stale = [f"  {run_dir}: {why}" for run_dir, why in flagged if not why.startswith(UNVERIFIABLE)]
    unchecked = [f"  {run_dir}: {why}" for run_dir, why in flagged if why.startswith(UNVERIFIABLE)]
    lines = []
    if stale:
        lines.append(f"{len(stale)} stale result(s) are included (docs/design/run-identity.md); "
                     "`protobench run GRID --rerun-stale` trains them again (those only scored by other metric "
                     "code: `protobench evaluate RUN_DIR --rescore`):\n" + "\n".join(stale))
    if unchecked:
        lines.append(f"{len(unchecked)} result(s) of own adapters are unverifiable: reading results never imports "
                     "code a result names (docs/design/run-identity.md, \"Reading results never runs code\"):\n" + "\n".join(unchecked))
    shown = {str(run_dir) for run_dir, _ in runs}
    counted = Counter(note for run_dir, note in (notes or {}).items() if run_dir in shown)
    lines.extend(f"{n} current result(s): {note}" for note, n in sorted(counted.items()))
    return "\n".join(lines) or None


def load_results(runs_dirs: Iterable[str | Path], *, required: bool = True) -> pd.DataFrame:
    """Load every ``result.json`` found (recursively) under the given runs directories.

    A file reached through two of the directories is read once; a malformed one is skipped with
    a warning naming it (:func:`readable`). Raises ProtobenchError when a directory does not
    exist, or (``required``) when none holds a readable result.
    """
    files = result_files(runs_dirs, required=required)
    return _tidy(readable(files, _read_result) if files else [])


def readable(paths: list[Path], read: Callable[[Path], Record]) -> list[Record]:
    """``read`` of each path; a file it refuses (ProtobenchError) costs its own row only, named
    in a warning on stderr. Raises when no file is readable."""
    records, refused = [], []
    for path in paths:
        try:
            records.append(read(path))
        except ProtobenchError as err:
            refused.append(str(err))
            print(f"warning: skipped {err}", file=sys.stderr)
    if refused and not records:
        raise ProtobenchError(f"no readable {RESULT_FILE}: " + "; ".join(refused))
    return records


def read_results_strictly(paths: list[Path]) -> tuple[pd.DataFrame, list[tuple[Path, str]]]:
    """The tidy frame of the readable ``result.json`` files among ``paths`` and, apart, every file
    refused with why: for a reader that must not drop a run silently (``leaderboard``)."""
    records, refused = [], []
    for path in paths:
        try:
            records.append(_read_result(path))
        except ProtobenchError as err:
            refused.append((path, str(err)))
    return _tidy(records), refused


def result_files(runs_dirs: Iterable[str | Path], *, required: bool = True) -> list[Path]:
    """Every ``result.json`` under the given directories, each once, sorted per directory.

    Raises ProtobenchError when a directory does not exist or when none holds a result.
    """
    files: dict[Path, Path] = {}
    dirs = [Path(d) for d in runs_dirs]
    for runs_dir in dirs:
        if not runs_dir.is_dir():
            raise ProtobenchError(
                f"Runs directory {runs_dir} does not exist; pass the folder that holds the "
                f"runs (runs/<grid>/<run_id>/{RESULT_FILE})."
            )
        for path in sorted(runs_dir.rglob(RESULT_FILE)):
            if any(part.endswith(TUNING_DIR_SUFFIX) for part in path.relative_to(runs_dir).parts[:-1]):
                continue  # a tuning trial (RUNS/GRID.tuning/trials/…): scored on validation, not a result
            files.setdefault(path.resolve(), path)
    if not files and required:
        shown = ", ".join(str(d) for d in dirs) or "(no directory given)"
        raise ProtobenchError(
            f"No {RESULT_FILE} under {shown}; finish some runs first or pass the folder "
            f"that holds them (runs/<grid>/<run_id>/{RESULT_FILE})."
        )
    return list(files.values())


def read_result_json(path: Path) -> dict[str, object]:
    """The JSON object of one ``result.json`` (plain data: nothing read can execute code)."""
    try:
        data = load_json(path)
    except UnreadableRunFile as exc:
        raise _malformed(path, exc.why) from None
    if data is None:
        raise _malformed(path, "it was removed while being read")
    return data


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
        return _tidy(_export_records(path, raw))
    if any(c.startswith(TIDY_PREFIX) for c in raw.columns):
        return _tidy(_table_records(path, raw))
    _check_csv_columns(path, list(raw.columns))
    records = [
        _csv_record(path, line, row)
        for line, row in zip(range(2, len(raw) + 2), raw.to_dict(orient="records"))
    ]
    return _tidy(records)


def _tidy(records: list[Record]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=list(TIDY_COLUMNS))
    for column in INTEGER_COLUMNS:
        frame[column] = frame[column].astype("Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = frame[column].astype("float64")
    return frame


# --- result.json -------------------------------------------------------------------------


def _malformed(path: Path | str, problem: str) -> ProtobenchError:
    return ProtobenchError(
        f"{path} is malformed: {problem}; re-run that run or delete the file "
        f"(the run then counts as unfinished)."
    )


def _read_result(path: Path) -> Record:
    return _result_record(path, read_result_json(path), run_dir=str(path.parent))


def _result_record(path: Path | str, data: Mapping[str, object], *, run_dir: str | None) -> Record:
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
        raise _malformed(path, f"'{name}' must be a JSON object")
    return value


def _field(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def _text(path: Path | str, data: Mapping[str, object], section: str, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise _malformed(path, f"{_field(section, key)} must be a non-empty string, got {value!r}")
    return value


def _optional_text(path: Path | str, data: Mapping[str, object], key: str) -> str | None:
    value = data.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise _malformed(path, f"{key} must be a non-empty string or absent, got {value!r}")
    return value


def _integer(path: Path | str, data: Mapping[str, object], section: str, key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _malformed(path, f"{_field(section, key)} must be an integer, got {value!r}")
    return value


def _number(path: Path | str, data: Mapping[str, object], section: str, key: str) -> float:
    value = data.get(key)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _malformed(path, f"{_field(section, key)} must be a number or null, got {value!r}")
    low, high = METRIC_RANGES.get(key, (-math.inf, math.inf)) if section == "metrics" else (-math.inf, math.inf)
    if not (math.isfinite(value) and low <= value <= high):  # 1e999 parses as inf: never a table cell or a plot
        span = f" in [{low:g}, {high:g}]" if math.isfinite(high) else ""
        raise _malformed(path, f"{_field(section, key)} = {value!r} is not a finite number{span}")
    return float(value)


# --- CSV ---------------------------------------------------------------------------------

#: a column every ``protobench export`` CSV has and no tidy CSV has: such a file is read as the
#: result.json files it flattened (reports.export.flatten), so ``report runs.csv`` equals ``report runs/``
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
        records.append(_result_record(where, nested, run_dir=row.get("run_dir") or None))
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
