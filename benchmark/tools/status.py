"""``protobench status``: what every run under a runs directory is doing, in one table."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmark.progress import output_console
from benchmark.run.identity import staleness
from benchmark.run.store import find_run_dirs
from methods.registry import display_name_of

METRIC_COLUMNS = ("acc", "con", "sta", "dis", "comp")


def _fmt(value: object) -> str:
    return "–" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)


def diagnostic_warnings(result: dict[str, Any] | None) -> list[str]:
    """The out-of-range diagnostics a finished run recorded (methods/diagnostics.py)."""
    return list(((result or {}).get("diagnostics") or {}).get("warnings") or [])


def _warnings_cell(warnings: list[str]) -> str:
    """The names of the out-of-range diagnostics (the full lines are printed under the table)."""
    names = [warning.split(" ", 1)[0] for warning in warnings]
    return f"[yellow]{', '.join(names)}[/yellow]" if names else ""


def status_records(root: Path, extra_states: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One record per run below ``root`` (each run's files read once): its directory, grid, run id,
    state, spec fields, metrics, out-of-range diagnostics, for a failed run the reason and for a
    stale one why it is stale (benchmark/run/identity.py: "stale" is a result the current code
    would not give, kept and shown, re-run by ``run --rerun-stale``).

    ``extra_states`` maps run directories to a scheduler state (e.g. SLURM's) shown beside ours."""
    records = []
    for rd in find_run_dirs(root):
        spec = rd.spec() or {}
        result = rd.result()
        stale = staleness(result) if result is not None else None
        state = ("stale" if stale else "done") if result is not None else rd.state
        reason = (rd.failure() or {}).get("reason", "") if state == "failed" else None
        if extra_states and str(rd.path) in extra_states and result is None:
            state = extra_states[str(rd.path)]
        records.append({"path": str(rd.path), "grid": rd.path.parent.name, "run_id": rd.path.name, "state": state,
                        "spec": spec, "metrics": (result or {}).get("metrics", {}), "failure": reason, "stale": stale,
                        "method_display_name": display_name_of(str(spec.get("method", "?")),
                                                               (result or {}).get("method_display_name")),
                        "warnings": diagnostic_warnings(result)})
    return records


def status_table(root: Path, extra_states: dict[str, str] | None = None
                 ) -> tuple[Table, Counter[str], list[tuple[Path, str]], list[tuple[Path, str]],
                            list[tuple[Path, str]]]:
    """A rich table of the runs below ``root``, the count of each state, the failed runs with
    their reasons, the out-of-range diagnostics of finished runs and the stale runs with why."""
    table = Table(title=f"runs under {root}", show_lines=False)
    for column in ("grid", "run", "state", "method", "J", "seed", "variant", "backbone", "dataset", *METRIC_COLUMNS,
                   "warnings"):
        table.add_column(column, justify="right" if column in METRIC_COLUMNS or column in ("J", "seed") else "left")
    counts: Counter[str] = Counter()
    failed: list[tuple[Path, str]] = []
    warned: list[tuple[Path, str]] = []
    stale: list[tuple[Path, str]] = []
    for record in status_records(root, extra_states):
        spec, metrics, state = record["spec"], record["metrics"], record["state"]
        if record["failure"] is not None:
            failed.append((Path(record["path"]), record["failure"]))
        if record["stale"] is not None:
            stale.append((Path(record["path"]), record["stale"]))
        counts[state] += 1
        warned.extend((Path(record["path"]), warning) for warning in record["warnings"])
        style = {"done": "green", "failed": "red"}.get(state, "yellow")
        table.add_row(
            record["grid"], record["run_id"][:8], f"[{style}]{state}[/{style}]",
            record["method_display_name"], str(spec.get("prototypes_per_class", "?")), str(spec.get("seed", "?")),
            str(spec.get("variant", "")), str(spec.get("backbone", "")), str(spec.get("dataset", "")),
            *(_fmt(metrics.get(m)) for m in METRIC_COLUMNS), _warnings_cell(record["warnings"]),
        )
    return table, counts, failed, warned, stale


def print_status(root: Path, console: Console | None = None, extra_states: dict[str, str] | None = None) -> Counter[str]:
    console = console or output_console()
    table, counts, failed, warned, stale = status_table(root, extra_states)
    console.print(table)
    total = sum(counts.values())
    console.print(f"{total} runs: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    for path, reason in failed:
        console.print(f"[red]failed[/red] {path}: {reason}")
    for path, why in stale:
        console.print(f"[yellow]stale[/yellow] {path}: {why} (`run GRID --rerun-stale` trains the grid's stale runs again)")
    for path, warning in warned:
        console.print(f"[yellow]diagnostic out of range[/yellow] {path}: {warning}")
    return counts
