"""The robustness stage over a grid (``protobench robustness GRID``): which of the grid's runs the stage
still has to score with the grid's settings, and which are settled; what every executor shares (the
local one below, the SLURM ones in ``slurm.executors``). Read without torch.

A run is settled when it was **scored** already (its ``result.json``'s ``robustness`` section holds
every asked family with these settings), is **not trained** (no ``result.json``: train the grid
first), is **stale** (its result is one the current code would not give), is **queued** (a live SLURM
job of the stage, recorded in ``robustness.job.json``), or **failed before** (``robustness.failure.json``,
or a SLURM job that ended in another state than COMPLETED without scoring it: time limit past its
requeues, out of memory, cancelled outside ``protobench cancel``, node failure) unless ``retry_failed``.
Every other run is to do (a COMPLETED job that did not score it ran other settings; one SLURM forgot, or
``protobench cancel`` cancelled, is submitted again); one
whose stage was cut short resumes from its finished batches (benchmark/robustness/stage.py).
"""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec
from benchmark.robustness.options import RobustnessOptions, check_options
from benchmark.run.identity import stale_result
from benchmark.run.pending import Outcome
from benchmark.run.states import AskScheduler, JobRecord, latest_job, was_cancelled
from benchmark.run.store import (STAGE_CANCELLED_FILE, STAGE_FAILURE_FILE, STAGE_JOB_FILE, STAGE_PARTIAL_DIR, RunDir,
                                  atomic_write_json, read_json)



def stage_settings(options: RobustnessOptions) -> dict[str, Any]:
    """What a family's recorded settings must equal for it to count as scored (its ``families`` list is
    the call it came from, so it is left out: families scored one command at a time still count)."""
    return {k: v for k, v in options.settings().items() if k != "families"}


def scored_with(result: dict[str, Any] | None, options: RobustnessOptions) -> bool:
    """Whether ``result``'s ``robustness`` section holds every family of ``options`` with its settings."""
    section = (result or {}).get("robustness")
    families = section.get("families") if isinstance(section, dict) else None
    if not isinstance(families, dict):
        return False
    wanted = stage_settings(options)
    return all(isinstance(families.get(f), dict) and {k: v for k, v in families[f].items() if k != "families"} == wanted
               for f in options.families)


def record_failure(run_dir: Path, err: BaseException) -> None:
    """Write ``robustness.failure.json``: the error's last line and its traceback."""
    lines = str(err).strip().splitlines()
    atomic_write_json(run_dir / STAGE_FAILURE_FILE, {
        "reason": f"{type(err).__name__}: {lines[-1] if lines else ''}".rstrip(": "),
        "traceback": "".join(traceback.format_exception(err)), "time": time.strftime("%Y-%m-%dT%H:%M:%S")})


def execute_stage(run_dir: Path, options: RobustnessOptions) -> dict[str, Any]:
    """Run the stage on one run (:func:`benchmark.robustness.stage.run_robustness`); a failure is
    recorded in ``robustness.failure.json`` and raised, a success removes an earlier one."""
    from benchmark.robustness.stage import run_robustness

    try:
        section = run_robustness(run_dir, options)
    except Exception as err:
        record_failure(run_dir, err)
        raise
    (run_dir / STAGE_FAILURE_FILE).unlink(missing_ok=True)
    return section


def pending_stage(grid: GridSpec, runs: list[RunSpec], runs_root: Path, options: RobustnessOptions, *,
                  retry_failed: bool = False, ask: AskScheduler | None = None) -> tuple[list[RunSpec], list[Outcome]]:
    """Split ``runs`` into those the stage still scores and those settled (module docstring). The
    options are checked against each run to do before anything is submitted (its recorded number of
    test images bounds ``images``). SLURM (``ask``) is asked only about runs with a stage job."""
    from benchmark.robustness.stage import recorded_test_images

    todo: list[RunSpec] = []
    settled: list[Outcome] = []
    dirs = [RunDir(grid.run_dir(runs_root, spec)) for spec in runs]
    jobs = {rd.path: latest_job(rd.path, STAGE_JOB_FILE) for rd in dirs}
    asked = [job.job_id for job in jobs.values() if job is not None and job.executor == "slurm"]
    answers = ask(asked) if asked and ask is not None else {}
    for spec, rd in zip(runs, dirs):
        result = rd.result()
        job = jobs[rd.path]
        answer = answers.get(job.job_id) if job is not None else None
        failure = read_json(rd.path / STAGE_FAILURE_FILE)
        if result is None:
            settled.append(Outcome(spec, "untrained", "no result.json: train it first (protobench run GRID)"))
        elif (stale := stale_result(spec, rd)) is not None:
            settled.append(Outcome(spec, "skipped-stale", f"{stale[1]}: train it again first (run --rerun-stale)"))
        elif scored_with(result, options):
            settled.append(Outcome(spec, "skipped", "already scored with these settings"))
        elif answer is not None and answer.live:
            settled.append(Outcome(spec, "queued", f"stage job {job.job_id} is {answer.state.lower()}"))
        elif not retry_failed and (failure is not None or (answer is not None and answer.state != "COMPLETED"
                                                           and not was_cancelled(rd.path, job, STAGE_CANCELLED_FILE))):
            why = failure.get("reason", "?") if isinstance(failure, dict) else \
                f"stage job {job.job_id} ended {answer.state} without scoring it"
            settled.append(Outcome(spec, "skipped-failed", f"failed before: {why} (use --retry-failed)"))
        else:
            check_options(options, recorded_test_images(rd.path))
            todo.append(spec)
    return todo, settled


def run_stage_local(grid: GridSpec, runs: list[RunSpec], runs_root: Path, options: RobustnessOptions, *,
                    retry_failed: bool = False, ask: AskScheduler | None = None,
                    report: Callable[[str], None] = lambda line: None) -> list[Outcome]:
    """The stage on each pending run in this process, one after another; one outcome per run. A run
    whose stage fails is recorded and the next one goes on."""
    todo, settled = pending_stage(grid, runs, runs_root, options, retry_failed=retry_failed, ask=ask)
    outcomes = list(settled)
    for number, spec in enumerate(todo, 1):
        run_dir = grid.run_dir(runs_root, spec)
        report(f"[{number}/{len(todo)}] {spec.run_id} {spec.label}: robustness {', '.join(options.families)}")
        try:
            section = execute_stage(run_dir, options)
        except Exception as err:  # recorded in robustness.failure.json with its traceback; the next run goes on
            lines = str(err).strip().splitlines()
            outcomes.append(Outcome(spec, "failed", lines[-1] if lines else type(err).__name__))
            continue
        shown = "  ".join(f"{k}={v:.2f}" for k, v in section["metrics"].items() if v is not None)
        report(f"  {shown}")
        outcomes.append(Outcome(spec, "done"))
    return outcomes


def grid_stage_options(grid: GridSpec, runs: list[RunSpec], overrides: dict[str, Any]) -> RobustnessOptions:
    """The grid's ``[robustness]`` settings with the command line's ``overrides`` (None: not given) on
    top; a grid without the table needs the families on the command line."""
    from benchmark.robustness.grid_options import grid_robustness
    from benchmark.estimates.workload import split_images

    given = {k: v for k, v in overrides.items() if v is not None}
    if not grid.robustness and "families" not in given:
        raise ProtobenchError(f"grid {grid.name!r} ({grid.source}) has no [robustness] table; give the families "
                              "(--families misalignment,faithfulness,perturbation) or add the table to the grid")
    images = min((split_images(spec, "test") for spec in runs), default=1)
    base = grid_robustness(grid.robustness, grid.source, images) if grid.robustness else RobustnessOptions(())
    options = replace(base, **given)
    check_options(options, images)
    return options


def stage_label(run_dir: Path, result: dict[str, Any] | None) -> str:
    """The stage on a run in a few words, for ``status`` ("" where it never ran): its failure, its
    finished batches while it runs (or was cut short), the families scored, or its submitted job."""
    failure = read_json(run_dir / STAGE_FAILURE_FILE)
    if isinstance(failure, dict):
        return f"failed: {failure.get('reason', '?')}"
    batches = sum(1 for _ in (run_dir / STAGE_PARTIAL_DIR).glob("*/batch-*.json"))
    if batches:
        return f"{batches} batch{'es' if batches > 1 else ''} scored"
    section = (result or {}).get("robustness")
    if isinstance(section, dict) and isinstance(section.get("families"), dict):
        return f"{', '.join(section['families'])} ({section.get('num_images', '?')} images)"
    job = latest_job(run_dir, STAGE_JOB_FILE)
    return f"job {job.job_id} submitted" if job is not None else ""


def live_stage_jobs(run_dirs: list[RunDir], ask: AskScheduler) -> dict[Path, JobRecord]:
    """The runs whose latest stage job SLURM says may still run (``protobench cancel``'s)."""
    jobs = {rd.path: job for rd in run_dirs if (job := latest_job(rd.path, STAGE_JOB_FILE)) and job.executor == "slurm"}
    answers = ask([job.job_id for job in jobs.values()]) if jobs else {}
    return {path: job for path, job in jobs.items() if (answer := answers.get(job.job_id)) is not None and answer.live}
