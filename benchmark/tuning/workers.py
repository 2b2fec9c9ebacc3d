"""A tuning worker as a picklable callable (:class:`TuneJob`): this process runs one, a SLURM array
runs several (slurm/tuning.py) that share every cell's study through its journal file."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.grid import load_grid, select_runs
from benchmark.spec_fields import TUNING_DIR_SUFFIX
from benchmark.tuning.config import tuning_cells, tuning_config
from benchmark.tuning.study import GRACE_S, HEARTBEAT_S
from benchmark.tuning.trials import WorkerSettings, work_on

STALE_BEATS = GRACE_S / HEARTBEAT_S  # a trial silent for this many beats is failed


def tuning_root(runs_root: Path, grid_name: str) -> Path:
    """Where a grid's studies and trial runs go (beside, not inside, its runs: ``status`` and
    ``report`` of ``RUNS/GRID`` never see a trial)."""
    return runs_root / f"{grid_name}{TUNING_DIR_SUFFIX}"


@dataclass(frozen=True)
class TuneJob:
    """Everything a worker needs to rebuild the cells from the grid file and work on each in turn."""

    grid_path: str
    overrides: dict[str, Any]
    only: tuple[str, ...]
    trials: int
    sampler: str
    runs_root: Path
    cache_root: Path | None
    heartbeat_s: float = HEARTBEAT_S
    prune: bool = False
    batch: int = 1
    batch_step: str = "auto"

    def __call__(self) -> list[dict[str, Any]]:
        grid = load_grid(self.grid_path, overrides=self.overrides)
        runs = select_runs(grid, list(self.only)) if self.only else list(grid.runs)
        config = tuning_config(grid, trials=self.trials, sampler=self.sampler, prune=self.prune)
        settings = WorkerSettings(tuning_root(self.runs_root, grid.name), self.cache_root, self.trials,
                                  heartbeat_s=self.heartbeat_s, grace_s=self.heartbeat_s * STALE_BEATS,
                                  batch=self.batch, batch_step=self.batch_step)
        return [work_on(cell, settings) for cell in tuning_cells(grid, runs, config)]
