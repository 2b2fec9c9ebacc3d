"""``run --hyperparameters tuned``: each grid run with its tuning cell's best trial.

A tuned run is the grid's run (every seed, the full training split, scored on test) with the best
trial's values in ``method_args``, variant ``tuned`` (``V-tuned`` for a variant ``V``) and a
``tuned`` record (study, trial, validation score, trial count, epoch budget, space fingerprint)
in its spec: its run id differs from the default run's, and reports keep the two in separate
cells (``report --tuning`` pairs them by seed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec
from benchmark.spec_fields import tuned_variant
from benchmark.study_summary import SUMMARY_FILE, read_study_summary
from benchmark.tuning.config import tuning_cells, tuning_config
from benchmark.tuning.study import study_dir
from benchmark.tuning.workers import tuning_root



def read_summary(directory: Path, label: str, grid_path: str) -> dict[str, Any]:
    """A study's summary.json, complete; otherwise one error naming the cell and the command to run."""
    path = directory / SUMMARY_FILE
    command = f"`protobench tune {grid_path} --trials N`"
    if not path.is_file():
        raise ProtobenchError(f"tuning cell {label} has no study summary ({path}); tune it first: {command}")
    summary = read_study_summary(path)
    if summary.get("best") is None or \
            summary.get("finished", summary.get("complete", 0)) < summary.get("budget", {}).get("trials", 1):
        raise ProtobenchError(f"the study of tuning cell {label} is not complete ({path}); finish it: {command}")
    return summary


def tuned_runs(grid: GridSpec, runs: list[RunSpec], runs_root: Path) -> list[RunSpec]:
    """``runs`` with their cell's best hyperparameters (the study must be complete)."""
    config = tuning_config(grid)
    root = tuning_root(runs_root, grid.name)
    tuned = []
    for cell in tuning_cells(grid, runs, config):
        summary = read_summary(study_dir(root, cell), cell.label, grid.source)
        best = summary["best"]
        record = {"study": summary["study"], "trial": best["number"], "validation": dict(
            zip(summary["objectives"], best["values"])), "trials": summary["budget"]["trials"],
            "complete_trials": summary["complete"], "epochs_per_trial": summary["budget"]["epochs_per_trial"],
            "space_fingerprint": summary["space_fingerprint"], "sampler": summary["sampler"],
            "validation_split": summary["validation"], "hyperparameters": best["params"]}
        if summary.get("pruning", {}).get("on"):  # absent when off: a tuned run's id is unchanged by this field
            record["pruned_trials"] = summary["pruning"]["pruned"]
        for spec in cell.runs:
            tuned.append(spec.with_overrides(method_args={**spec.method_args, **best["params"]},
                                             variant=tuned_variant(spec.variant), tuned=record))
    return tuned
