"""``protobench status``: what every run under a runs directory is doing, in one table."""
from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.progress import output_console
from benchmark.robustness.grid_stage import stage_label
from benchmark.run.epochlog import read_epoch_log
from benchmark.run.identity import CodeState, code_state, rescoring
from benchmark.run.own_code import NO_IMPORTS, AdapterImports, is_unverifiable
from benchmark.run.store import LOCK_TEXT, RunDir, UnreadableRunFile, find_run_dirs, load_json, lock_holder, read_json
from benchmark.run.states import ATTEMPT_FILE, latest_job
from methods.registry import display_name_of
from reports.layouts import display_name

METRIC_COLUMNS = ("acc", "con", "sta", "dis", "comp")
VALIDATION_MARK = " (val)"  # a tuning trial's scores: on the validation split, never comparable to a test score


def _on_validation(spec: dict[str, Any]) -> bool:
    return spec.get("evaluation_split") == "validation"


def _total_epochs(spec: dict) -> int | None:
    """A running run's epochs in all (its method's stages: model code, so torch); None where the
    training stack does not import (a login node reading a cluster's runs)."""
    try:
        from benchmark.estimates.workload import run_epochs
    except ImportError:
        return None
    return run_epochs(RunSpec.from_json(spec, import_trunk=False))


def _fmt(value: object) -> str:
    return "–" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)


def diagnostic_warnings(result: dict[str, Any] | None) -> list[str]:
    """The out-of-range diagnostics a finished run recorded (methods/diagnostics.py)."""
    return list(((result or {}).get("diagnostics") or {}).get("warnings") or [])


def expected_warnings(result: dict[str, Any] | None) -> list[dict[str, str]]:
    """The out-of-range diagnostics the run's configuration makes expected, each with its reason."""
    return list(((result or {}).get("diagnostics") or {}).get("expected_warnings") or [])


def _warnings_cell(warnings: list[str]) -> str:
    """The names of the out-of-range diagnostics (the full lines are printed under the table)."""
    names = [warning.split(" ", 1)[0] for warning in warnings]
    return f"[yellow]{', '.join(names)}[/yellow]" if names else ""


def status_records(root: Path, extra_states: dict[str, str] | None = None,
                   adapters: AdapterImports = NO_IMPORTS) -> list[dict[str, Any]]:
    """One record per run below ``root`` (each run's files read once): its directory, grid, run id,
    state, spec fields, metrics, out-of-range diagnostics, for a failed run the reason and for a
    stale one why it is stale (benchmark/run/identity.py: "stale" is a result the current code
    would not give, kept and shown, re-run by ``run --rerun-stale``) or, for a current one scored
    by other metric code, why to rescore it (``evaluate --rescore``).

    ``extra_states`` maps run directories to a scheduler state (e.g. SLURM's) shown beside ours.
    Nothing a run's files name is imported but the own adapters ``adapters`` allows
    (benchmark/run/own_code.py): another's result reads "unverifiable", never stale."""
    records = []
    for rd in find_run_dirs(root):
        unreadable: list[str] = []
        spec = _safe_read(rd.spec_path, unreadable) or {}
        result = _safe_read(rd.result_path, unreadable)
        if result is not None and not _known_result(result):
            unreadable.append(str(UnreadableRunFile(rd.result_path, "its metrics or diagnostics are not the "
                                                    "records the suite writes")))
            result = None
        code = code_state(result, adapters=adapters, run_dir=rd.path) if result is not None else CodeState()
        stale = code.stale
        rescore = rescoring(result) if result is not None and not stale else None
        state = ("stale" if stale and not is_unverifiable(stale) else "done") if result is not None \
            else "unreadable" if rd.result_path.exists() else rd.state
        reason = str((_safe_read(rd.failure_path, unreadable) or {}).get("reason", "")) if state == "failed" else None
        holder = lock_holder(rd.path) if state in ("new", "started") else None
        if holder is not None:  # a local process trains it now: the word SLURM's runs use
            state = "running"
        if extra_states and str(rd.path) in extra_states and result is None and state != "unreadable":
            state = extra_states[str(rd.path)]
        progress = running_progress(rd, spec, holder, adapters) if state.startswith("running") else ""
        records.append({"path": str(rd.path), "grid": rd.path.parent.name, "run_id": rd.path.name, "state": state,
                        "spec": spec, "metrics": (result or {}).get("metrics", {}), "failure": reason, "stale": stale,
                        "rescore": rescore, "code_note": code.note, "code": code_label(state, code, result),
                        "method_display_name": _display_name(str(spec.get("method", "?")), result, adapters),
                        "warnings": diagnostic_warnings(result), "expected_warnings": expected_warnings(result),
                        "unreadable": unreadable, "progress": progress,
                        "robustness": stage_label(rd.path, result) if result is not None else ""})
    return records


def code_label(state: str, code: CodeState, result: dict[str, Any] | None) -> str:
    """A finished run's code state in a word (current, refactored: behaviour identical, stale,
    unverifiable) and, for an installed package's method, the package and version that trained it."""
    if result is None:
        return ""
    word = ("unverifiable" if is_unverifiable(code.stale) else "stale") if code.stale else \
        "refactored, identical" if code.note else "current"
    provider = result.get("method_provider") if isinstance(result.get("method_provider"), dict) else {}
    name = provider.get("distribution")
    return f"{word} · {name} {provider.get('version', '?')}" if name and name != "protobench" else word


def _display_name(method: str, result: dict[str, Any] | None, adapters: AdapterImports) -> str:
    """The method's current label where its code may be imported (a suite method; an own adapter
    ``adapters`` allows), else the one its result recorded (reports.layouts.display_name)."""
    name = (result or {}).get("method_display_name")
    recorded = name if isinstance(name, str) and name else None
    return display_name_of(method, recorded) if adapters.allows(method) else display_name(method, recorded)


def running_progress(rd: RunDir, spec: dict[str, Any], holder: str | None,
                     adapters: AdapterImports = NO_IMPORTS) -> str:
    """``epoch k/n, H:MM:SS, job J on NODE`` of a running run: epochs from its metrics.jsonl and
    its method's stages, elapsed time and node from the job's attempt.json (SLURM) or the lock
    holder (local); a part that cannot be told is left out. An own adapter's total of epochs
    needs its code: shown only where ``adapters`` allows importing it."""
    parts = []
    try:
        records = read_epoch_log(rd.metrics_path)
        epoch = records[-1]["epoch"] if records else 0
        method = spec.get("method")
        total = _total_epochs(spec) if isinstance(method, str) and adapters.allows(method) else None
        if total is not None:
            parts.append(f"epoch {epoch}/{total}")
        else:
            parts.append(f"epoch {epoch}")
    except ProtobenchError:
        pass
    job = latest_job(rd.path)
    attempt = read_json(rd.path / ATTEMPT_FILE) or {}
    if job is not None and job.executor == "slurm" and attempt.get("job_id") == job.job_id:
        since, node, who = attempt.get("started"), attempt.get("host"), f"job {job.job_id}"
    else:
        found = LOCK_TEXT.fullmatch(holder or "")
        since, node, who = (found["since"], found["host"], f"pid {found['pid']}") if found else (None, None, "")
    try:
        parts.append(str(timedelta(seconds=round(time.time() - time.mktime(time.strptime(str(since),
                                                                                        "%Y-%m-%dT%H:%M:%S"))))))
    except (ValueError, OverflowError):
        pass
    if who:
        parts.append(f"{who} on {node}" if isinstance(node, str) else who)
    return ", ".join(parts)


def _safe_read(path: Path, unreadable: list[str]) -> dict[str, Any] | None:
    """``path``'s JSON object, None when absent; an unreadable file is named in ``unreadable``."""
    try:
        return load_json(path)
    except UnreadableRunFile as err:
        unreadable.append(str(err))
        return None


def _known_result(result: dict[str, Any]) -> bool:
    """The parts of a result.json the table shows have the types the suite writes."""
    metrics, diagnostics = result.get("metrics", {}), result.get("diagnostics") or {}
    return (isinstance(metrics, dict) and isinstance(diagnostics, dict)
            and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in metrics.values())
            and all(isinstance(w, str) for w in diagnostics.get("warnings") or []))


def run_order(record: dict[str, Any]) -> tuple:
    """Rows in the order a reader scans them: grid, method, J, seed, then the other keys, run id."""
    spec = record["spec"]
    j, seed = spec.get("prototypes_per_class"), spec.get("seed")
    return (record["grid"], record["method_display_name"], (not isinstance(j, int), j if isinstance(j, int) else 0),
            (not isinstance(seed, int), seed if isinstance(seed, int) else 0), str(spec.get("variant", "")),
            str(spec.get("backbone", "")), str(spec.get("dataset", "")), record["run_id"])


def shown_columns(records: list[dict[str, Any]], wide: bool) -> list[str]:
    """Every column with ``wide``; else (to fit 100 characters) grid, variant, backbone and dataset
    only where they vary, warnings and progress only where a run has some."""
    varies = {key: len({str(r["spec"].get(key, "")) for r in records}) > 1 for key in ("variant", "backbone", "dataset")}
    columns = ["grid"] if wide or len({r["grid"] for r in records}) > 1 else []
    columns += ["run", "state", "code", "method", "J", "seed"]
    columns += [key for key in ("variant", "backbone", "dataset") if wide or varies[key]]
    columns += list(METRIC_COLUMNS)
    columns += [key for key in ("robustness", "warnings", "progress") if wide or any(r[key] for r in records)]
    return columns


def status_table(root: Path, records: list[dict[str, Any]], *, wide: bool = False
                 ) -> tuple[Table, Counter[str], list[tuple[Path, str]], list[tuple[Path, str]],
                            list[tuple[Path, str]]]:
    """A rich table of the runs below ``root`` (their :func:`status_records`, sorted by
    :func:`run_order`), the count of each state, the failed runs with their reasons, the
    out-of-range diagnostics of finished runs and the stale runs with why. ``wide``: every column
    (else :func:`shown_columns`)."""
    table = Table(title=f"runs under {root}", show_lines=False)
    columns = shown_columns(records, wide)
    for column in columns:
        table.add_column(column, justify="right" if column in METRIC_COLUMNS or column in ("J", "seed") else "left")
    counts: Counter[str] = Counter()
    failed: list[tuple[Path, str]] = []
    warned: list[tuple[Path, str]] = []
    stale: list[tuple[Path, str]] = []
    for record in sorted(records, key=run_order):
        spec, metrics, state = record["spec"], record["metrics"], record["state"]
        if record["failure"] is not None:
            failed.append((Path(record["path"]), record["failure"]))
        failed.extend((Path(record["path"]), f"unreadable: {problem}") for problem in record["unreadable"])
        if record["stale"] is not None:
            stale.append((Path(record["path"]), record["stale"]))
        counts[state] += 1
        warned.extend((Path(record["path"]), warning) for warning in record["warnings"])
        style = {"done": "green", "failed": "red"}.get(state, "yellow")
        cells = {"grid": record["grid"], "run": record["run_id"][:8], "state": f"[{style}]{state}[/{style}]",
                 "code": escape(record["code"]),
                 "method": record["method_display_name"], "J": str(spec.get("prototypes_per_class", "?")),
                 "seed": str(spec.get("seed", "?")), "variant": str(spec.get("variant", "")),
                 "backbone": str(spec.get("backbone", "")), "dataset": str(spec.get("dataset", "")),
                 **{m: _fmt(metrics.get(m)) + (VALIDATION_MARK if _on_validation(spec) and metrics.get(m) is not None
                                               else "") for m in METRIC_COLUMNS},
                 "warnings": _warnings_cell(record["warnings"]),
                 "progress": escape(record["progress"]), "robustness": escape(record["robustness"])}
        table.add_row(*(cells[column] for column in columns))
    return table, counts, failed, warned, stale


def print_status(root: Path, console: Console | None = None, extra_states: dict[str, str] | None = None,
                 adapters: AdapterImports = NO_IMPORTS, *, wide: bool = False) -> Counter[str]:
    console = console or output_console()
    records = status_records(root, extra_states, adapters)  # one read of every run: the table and the summary agree
    table, counts, failed, warned, stale = status_table(root, records, wide=wide)
    console.print(table)
    total = sum(counts.values())
    console.print(f"{total} runs: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    if any(_on_validation(r["spec"]) for r in records):
        console.print(f"{VALIDATION_MARK.strip()}: scored on the validation split (a tuning trial), not on the test split",
                      markup=False)
    for path, reason in failed:
        console.print(f"[red]failed[/red] {escape(str(path))}: {escape(reason)}")
    for path, why in stale:
        if is_unverifiable(why):  # an own adapter's code was not imported: no advice to retrain
            console.print(f"[yellow]unverifiable[/yellow] {escape(str(path))}: {escape(why)}")
        else:
            console.print(f"[yellow]stale[/yellow] {escape(str(path))}: {escape(why)} "
                          "(`run GRID --rerun-stale` trains the grid's stale runs again)")
    for note, n in sorted(Counter(r["code_note"] for r in records if r["code_note"] is not None).items()):
        console.print(f"{n} current result(s): {note}", markup=False)
    for record in records:
        if record["rescore"] is not None:
            console.print(f"[yellow]rescore[/yellow] {escape(record['path'])}: "
                          + escape(record["rescore"].replace("RUN_DIR", record["path"])))
    for path, warning in warned:
        console.print(f"[yellow]diagnostic out of range[/yellow] {path}: {warning}")
    for line in expected_summary(records):
        console.print(line, markup=False, style="dim")
    return counts


def expected_summary(records: list[dict[str, Any]]) -> list[str]:
    """One line per expected out-of-range diagnostic over all runs: how many runs, the values'
    range and why the protocol makes it expected (instead of one warning per run)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for record in records:
        for item in record["expected_warnings"]:
            path, _, rest = item["warning"].partition(" = ")
            grouped.setdefault((path, item["why"]), []).append(rest)
    lines = []
    for (path, why), found in grouped.items():
        values = sorted(float(rest.split(" ", 1)[0]) for rest in found)
        bound = found[0].split(" ", 1)[1]
        shown = f"{values[0]:.3g}" if len(values) == 1 else f"{values[0]:.3g}–{values[-1]:.3g}"
        lines.append(f"expected, not a fault: {path} {bound} in {len(values)} run(s) ({shown}): {why}")
    return lines
