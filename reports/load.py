"""Read finished runs (``result.json``) and published-number CSVs into the tidy frame.

Both readers return a frame with exactly ``reports.columns.TIDY_COLUMNS``. A run row has
``n_seeds = 1`` and its seed; a CSV row may stand for an aggregate (``n_seeds > 1``,
no seed, optional ``<metric>_std`` columns), as the paper's five-seed means do.
"""
from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from benchmark.errors import ProtobenchError, nearest_sibling
from benchmark.run.store import UnreadableRunFile, load_json
from benchmark.spec_fields import TUNING_DIR_SUFFIX
from reports.csv_input import load_csv
from reports.result_record import Record, malformed, result_record, tidy

RESULT_FILE = "result.json"


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
    return tidy(readable(files, _read_result) if files else [])


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
    return tidy(records), refused


def result_files(runs_dirs: Iterable[str | Path], *, required: bool = True) -> list[Path]:
    """Every ``result.json`` under the given directories, each once, sorted per directory.

    Raises ProtobenchError when a directory does not exist or when none holds a result.
    """
    files: dict[Path, Path] = {}
    dirs = [Path(d) for d in runs_dirs]
    for runs_dir in dirs:
        if not runs_dir.is_dir():
            raise ProtobenchError(
                f"Runs directory {runs_dir} does not exist{nearest_sibling(runs_dir)}; pass the folder that holds the "
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
        raise malformed(path, exc.why) from None
    if data is None:
        raise malformed(path, "it was removed while being read")
    return data


def _read_result(path: Path) -> Record:
    return result_record(path, read_result_json(path), run_dir=str(path.parent))
