"""Runs as scheduler jobs: the submitted callables, :class:`RunJob` (training) and
:class:`RobustnessJob` (the robustness stage of finished runs). A RunJob writes
``<run_dir>/attempt.json`` each time it starts the run (job id, SLURM_RESTART_COUNT, host, the
code directory it imported, its place in the task). The job records and a run's state seen from
its directory and the scheduler live in :mod:`benchmark.run.states`.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import submitit

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.robustness.options import RobustnessOptions
from benchmark.run.own_code import own_code_paths
from benchmark.run.states import ATTEMPT_FILE
from benchmark.run.store import RunBusy, RunDir, atomic_write_json

RUNNING_ELSEWHERE = "running_elsewhere"  # a run's outcome in a job's answer when another process holds it
# How long a job waits for its run's lock: longer than an NFSv4 lease (90 s by default), after
# which the server frees the locks of a failed node, so a job requeued after a node failure
# is not turned away by its dead predecessor's lock.
LOCK_WAIT_S = 180.0


def adapter_paths(specs: list[RunSpec]) -> tuple[Path, ...]:
    """The absolute ``sys.path`` entries this process imports the runs' own code from (methods
    named ``package.module:Class`` and trunks named ``package.module:factory``): a job appends
    them to its ``sys.path``, so an adapter or trunk found through a relative ``PYTHONPATH`` here
    is found in a job started elsewhere (in its code snapshot) too, read from where it lies."""
    return own_code_paths([name for spec in specs for name in (spec.method, spec.backbone)])


def code_dir() -> Path:
    """The directory the ``benchmark`` package of this process was imported from."""
    import benchmark

    return Path(benchmark.__file__).resolve().parent.parent


def enter_code(snapshot: Path | None, paths: tuple[Path, ...]) -> Path:
    """In a job: check that the suite was imported from its code snapshot (when it has one) and append
    the runs' own adapter paths to ``sys.path``, after the suite's entries (an adapter cannot shadow the
    snapshot). Returns where the suite was imported from."""
    imported = code_dir()
    if snapshot is not None and imported != snapshot.resolve():
        raise ProtobenchError(f"the job imported the suite from {imported}, not from its code snapshot "
                              f"{snapshot}; remove {imported} from PYTHONPATH")
    for path in paths:
        if str(path) not in sys.path:
            sys.path.append(str(path))
    return imported


@dataclass(frozen=True)
class TaskRun:
    """One run of an array task: its spec, its directory, and where its TensorBoard events go."""

    spec: RunSpec
    run_dir: Path
    tensorboard_dir: Path | None = None


class RunJob(submitit.helpers.Checkpointable):
    """The runs of one array task as a submitit job, back to back in one process (one run
    unless the profile packs ``runs_per_task`` > 1). The task pays process start-up and
    imports once; its runs share one token-cache group, so later runs read entries that the
    first one built, opened (OS page cache) or staged to node-local scratch.

    On SIGUSR2 (time limit or preemption) submitit calls ``checkpoint`` (inherited: resubmit
    this same callable) and requeues the job; the new attempt skips the runs that have their
    result, and ``execute_run`` resumes the interrupted one from ``checkpoint.pt`` at its last
    finished epoch. A job requeued from outside (``scontrol requeue``, preemption by SLURM)
    restarts the same way. Each run writes its ``attempt.json`` when it starts, so ``status``
    tells the running run of a task from the ones waiting behind it. A failed run (its
    ``failure.json``) does not stop the task's next runs; the task then ends with the first
    failure's error."""

    def __init__(self, runs: tuple[TaskRun, ...], cache_root: Path, snapshot: Path | None, *,
                 allow_code_change: bool = False, adapter_paths: tuple[Path, ...] = ()) -> None:
        if not runs:
            raise ValueError("an array task needs at least one run")
        self.runs, self.cache_root, self.snapshot = runs, cache_root, snapshot
        self.allow_code_change = allow_code_change
        self.adapter_paths = adapter_paths

    def __call__(self) -> dict[str, dict[str, str]]:
        """Each run's outcome by run id: ``{"state": "done"}`` or ``{"state": RUNNING_ELSEWHERE,
        "holder": …}`` (another live process holds its lock and writes its result)."""
        imported = enter_code(self.snapshot, self.adapter_paths)
        outcomes: dict[str, dict[str, str]] = {}
        failures: list[BaseException] = []
        for position, run in enumerate(self.runs):
            if RunDir(run.run_dir).is_complete:  # finished before this task was requeued: not trained again
                outcomes[run.spec.run_id] = {"state": "done"}
                continue
            try:
                outcomes[run.spec.run_id] = self._execute(run, position, imported)
            except Exception as err:  # recorded in the run's failure.json by execute_run
                failures.append(err)
        if failures:
            raise failures[0]
        return outcomes

    def _execute(self, run: TaskRun, position: int, imported: Path) -> dict[str, str]:
        from benchmark.run.runner import execute_run

        run.run_dir.mkdir(parents=True, exist_ok=True)
        env = submitit.JobEnvironment()
        atomic_write_json(run.run_dir / ATTEMPT_FILE, {
            "job_id": env.job_id, "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
            "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "code_dir": str(imported),
            "task_position": position, "task_runs": len(self.runs),
        })
        try:
            execute_run(run.spec, run.run_dir, cache_root=self.cache_root, progress=False,
                        allow_code_change=self.allow_code_change, lock_wait_s=LOCK_WAIT_S,
                        tensorboard_dir=run.tensorboard_dir)
            return {"state": "done"}
        except RunBusy as busy:  # not a failure: the live holder writes the result
            return {"state": RUNNING_ELSEWHERE, "holder": busy.holder}
        except SystemExit:
            # submitit's requeue handler exits the process after checkpointing; the run is not failed
            RunDir(run.run_dir).failure_path.unlink(missing_ok=True)
            raise


# ---- a run seen from its directory and from the scheduler ------------------------------------


class RobustnessJob(submitit.helpers.Checkpointable):
    """The robustness stage (``protobench robustness GRID``) on the finished runs of one array task, back
    to back in one process. On SIGUSR2 (time limit or preemption) submitit requeues this same callable;
    the new attempt skips the runs already scored with these settings and resumes a cut-short one from
    its finished batches (benchmark/robustness/stage.py). A run whose stage fails records
    ``robustness.failure.json`` and the task goes on with its next run, then ends with the first failure."""

    def __init__(self, run_dirs: tuple[Path, ...], options: RobustnessOptions, snapshot: Path | None, *,
                 adapter_paths: tuple[Path, ...] = ()) -> None:
        if not run_dirs:
            raise ValueError("an array task needs at least one run")
        self.runs, self.options, self.snapshot = run_dirs, options, snapshot  # runs: their directories
        self.adapter_paths = adapter_paths

    def __call__(self) -> dict[str, dict[str, str]]:
        """Each run's outcome by run directory: ``{"state": "done"}``."""
        from benchmark.robustness.grid_stage import execute_stage, scored_with

        enter_code(self.snapshot, self.adapter_paths)
        outcomes: dict[str, dict[str, str]] = {}
        failures: list[BaseException] = []
        for run_dir in self.runs:
            if not scored_with(RunDir(run_dir).result(), self.options):
                try:
                    execute_stage(run_dir, self.options)
                except Exception as err:  # recorded in the run's robustness.failure.json
                    failures.append(err)
                    continue
            outcomes[str(run_dir)] = {"state": "done"}
        if failures:
            raise failures[0]
        return outcomes
