"""The local executor: the runs of a grid in this process, one after another (``protobench run``
without ``--executor``), and what every executor shares: which runs are pending
(:func:`pending_runs`), the checks before any training (:func:`preflight`) and a run's outcome.
The SLURM executors (``slurm.executors``) build on these; this module imports nothing of ``slurm``.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmark.backbones import backbone_spec
from benchmark.config import RunSpec, check_prototype_count
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec
from benchmark.method_lookup import declaration, stand_in_method
from benchmark.run.identity import discard_stale, stale_result
from benchmark.run.prepare import check_data, check_device, check_images_per_class, load_trunk
from benchmark.run.runner import execute_run
from benchmark.run.states import AskScheduler, run_states
from benchmark.run.store import RunBusy, RunDir


@dataclass(frozen=True)
class Outcome:
    spec: RunSpec
    state: str  # "done" | "skipped" | "failed" | "skipped-failed" | "queued" (pending or running in SLURM)
    #           | "skipped-stale" (a result the current code would not give: --rerun-stale)
    #           | "running-elsewhere" (another live process holds the run's lock)
    detail: str = ""

    @property
    def failed(self) -> bool:
        """The run has no result because it failed, now or in an earlier invocation."""
        return self.state in ("failed", "skipped-failed")


def pending_runs(grid: GridSpec, runs: list[RunSpec], runs_root: Path, *, retry_failed: bool,
                 rerun_stale: bool = False, ask: AskScheduler | None = None) -> tuple[list[RunSpec], list[Outcome]]:
    """Split runs into those to execute and those settled: done, stale (benchmark/run/identity.py)
    unless ``rerun_stale``, still pending or running in SLURM, or failed (a failure.json, or a
    SLURM job that ended without a result) unless ``retry_failed``. SLURM is asked (``ask``:
    ``slurm.scheduler.query_jobs``) only about unfinished runs that were submitted to it. A stale result re-run is deleted first (with its
    checkpoint and epoch log; an earlier version's run directory as a whole)."""
    dirs = [RunDir(grid.run_dir(runs_root, spec)) for spec in runs]
    states = run_states(dirs, ask)
    todo, settled = [], []
    for spec, rd in zip(runs, dirs):
        rd.remove_abandoned_temp_files()  # a killed writer's, done runs' included (docs/guides/runs.md)
        state = states[rd.path]
        stale = stale_result(spec, rd)
        if stale is not None and not rerun_stale:
            settled.append(Outcome(spec, "skipped-stale", f"{stale[1]}: {stale[0].path} (use --rerun-stale)"))
        elif stale is not None:
            try:
                discard_stale(stale[0], whole_dir=stale[0].path != rd.path)
                todo.append(spec)
            except RunBusy as busy:
                settled.append(Outcome(spec, "running-elsewhere", busy.holder))
        elif state.label == "done":
            settled.append(Outcome(spec, "skipped", "already done"))
        elif state.live:
            settled.append(Outcome(spec, "queued", f"job {state.job.job_id if state.job else '?'} is {state.label}"))
        elif state.failed and not retry_failed:
            reason = (rd.failure() or {}).get("reason", "") if state.label == "failed" else state.label
            settled.append(Outcome(spec, "skipped-failed", f"failed before: {reason} (use --retry-failed)"))
        else:
            todo.append(spec)
    return todo, settled


def preflight(runs: list[RunSpec]) -> None:
    """Every user error before any training, so a bad grid fails at once rather than hours in:
    each method built with its ``method_args`` on a stand-in context, every dataset's
    annotations read and every image decoded (:func:`benchmark.data.check_images`), the number
    of prototypes against the dataset's classes (and against each class's training images for a
    method that clusters them), every trunk's weights loaded."""
    seen_data: dict[tuple[str, str, int], int] = {}  # → number of classes
    seen_trunks: set[tuple[str, str, str]] = set()
    for spec in runs:
        stand_in_method(spec.method, spec.method_args, spec.prototypes_per_class, backbone=spec.backbone,
                        has_cls_attention=backbone_spec(spec.backbone).architecture.has_cls_token)
        data_key = (spec.dataset, spec.data_root, spec.image_size)
        if data_key not in seen_data:
            seen_data[data_key] = check_data(spec)
        check_prototype_count(spec, seen_data[data_key])
        if declaration(spec.method).clusters_each_class:
            check_images_per_class(spec)
        trunk_key = (spec.backbone, spec.weights, repr(sorted(spec.backbone_args.items())))
        if trunk_key not in seen_trunks:
            seen_trunks.add(trunk_key)
            load_trunk(spec)


def run_local(grid: GridSpec, runs: list[RunSpec], runs_root: Path, cache_root: Path, *,
              retry_failed: bool = False, rerun_stale: bool = False, progress: bool | None = None,
              allow_code_change: bool = False, tensorboard_root: Path | None = None,
              ask: AskScheduler | None = None, report: Callable[[str], None] | None = None) -> list[Outcome]:
    """Execute the pending runs in this process; a failed run is recorded and the next one starts.
    ``tensorboard_root``: each run's TensorBoard events go to ``tensorboard_root/<grid>/<run_id>``;
    ``ask``: how to ask SLURM about runs submitted to it (:func:`pending_runs`); ``report``: receives
    one overall progress line after each run (runs settled of the grid's, elapsed time)."""
    todo, outcomes = pending_runs(grid, runs, runs_root, retry_failed=retry_failed, rerun_stale=rerun_stale, ask=ask)
    for spec in {spec.device: spec for spec in todo}.values():  # a device this machine lacks is a user error
        check_device(spec)
    preflight(todo)
    started, settled = time.monotonic(), len(runs) - len(todo)
    for spec in todo:
        try:
            execute_run(spec, grid.run_dir(runs_root, spec), cache_root=cache_root, progress=progress,
                        allow_code_change=allow_code_change,
                        tensorboard_dir=grid.run_dir(tensorboard_root, spec) if tensorboard_root else None)
            outcomes.append(Outcome(spec, "done"))
        except RunBusy as busy:  # another `protobench run` (or a job) is training it: leave it alone
            outcomes.append(Outcome(spec, "running-elsewhere", busy.holder))
        except ProtobenchError as err:
            outcomes.append(Outcome(spec, "failed", str(err)))
        except Exception as err:  # recorded in failure.json by execute_run
            outcomes.append(Outcome(spec, "failed", f"{type(err).__name__}: {err}"))
        settled += 1
        if report is not None:
            failed = sum(o.state == "failed" for o in outcomes)
            elapsed = int(time.monotonic() - started)
            report(f"grid {grid.name!r}: {settled}/{len(runs)} runs settled"
                   + (f" ({failed} failed)" if failed else "")
                   + f", {elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d} elapsed")
    return outcomes
