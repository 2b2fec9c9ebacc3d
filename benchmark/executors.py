"""Executors: where the runs of a grid execute. ``local`` runs them in this process, one after
another (the default)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec
from benchmark.runner import execute_run, load_split, load_trunk
from benchmark.store import RunDir


@dataclass(frozen=True)
class Outcome:
    spec: RunSpec
    state: str  # "done" | "skipped" | "failed" | "skipped-failed"
    detail: str = ""


def pending_runs(grid: GridSpec, runs: list[RunSpec], runs_root: Path, *, retry_failed: bool) -> tuple[list[RunSpec], list[Outcome]]:
    """Split runs into those to execute and those already settled (done, or failed without --retry-failed)."""
    todo, settled = [], []
    for spec in runs:
        rd = RunDir(grid.run_dir(runs_root, spec))
        if rd.is_complete:
            settled.append(Outcome(spec, "skipped", "already done"))
        elif rd.state == "failed" and not retry_failed:
            reason = (rd.failure() or {}).get("reason", "")
            settled.append(Outcome(spec, "skipped-failed", f"failed before: {reason} (use --retry-failed)"))
        else:
            todo.append(spec)
    return todo, settled


def preflight(runs: list[RunSpec]) -> None:
    """Read every dataset's annotations and check every trunk's weights before any training,
    so a missing file fails the grid at once rather than hours in."""
    seen_data: set[tuple[str, str, int]] = set()
    seen_trunks: set[tuple[str, str, str]] = set()
    for spec in runs:
        data_key = (spec.dataset, spec.data_root, spec.image_size)
        if data_key not in seen_data:
            seen_data.add(data_key)
            load_split(spec, "train")
            load_split(spec, "test")
        trunk_key = (spec.backbone, spec.weights, repr(sorted(spec.backbone_args.items())))
        if trunk_key not in seen_trunks:
            seen_trunks.add(trunk_key)
            load_trunk(spec)


def run_local(grid: GridSpec, runs: list[RunSpec], runs_root: Path, cache_root: Path, *,
              retry_failed: bool = False, progress: bool | None = None) -> list[Outcome]:
    """Execute the pending runs in this process; a failed run is recorded and the next one starts."""
    todo, outcomes = pending_runs(grid, runs, runs_root, retry_failed=retry_failed)
    preflight(todo)
    for spec in todo:
        try:
            execute_run(spec, grid.run_dir(runs_root, spec), cache_root=cache_root, progress=progress)
            outcomes.append(Outcome(spec, "done"))
        except ProtobenchError as err:
            outcomes.append(Outcome(spec, "failed", str(err)))
        except Exception as err:  # recorded in failure.json by execute_run
            outcomes.append(Outcome(spec, "failed", f"{type(err).__name__}: {err}"))
    return outcomes
