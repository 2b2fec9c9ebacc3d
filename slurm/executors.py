"""Executors: where the runs of a grid execute.

- ``local`` (default): in this process, one run after another (:mod:`benchmark.run.local`).
- ``submitit-local``, ``debug``, ``slurm``: through submitit (``AutoExecutor`` with the
  cluster named explicitly). Runs are grouped by job shape (cluster profile); each group is
  one job array (``executor.batch()``) of :class:`slurm.jobs.RunJob` callables, ordered so
  that runs reading the same token caches are neighbours; with the profile's ``runs_per_task``
  > 1, neighbours of one token-cache group share an array task, within its time budget by the
  plan's per-run estimate (:func:`benchmark.cluster.pack_runs`). Runs that share a cache entry and
  start together do not build it twice: the cache's per-entry lock file
  (``benchmark/cache/lock.py``, valid across nodes) makes all but one wait, then they read the
  published entry. ``submitit-local`` and ``debug`` wait for their jobs; ``slurm`` returns once
  the arrays are queued.

The robustness stage of a grid's finished runs (``protobench robustness GRID``) is submitted the same
way (:func:`submit_stage`): one job array per job shape of :class:`slurm.jobs.RobustnessJob` callables,
each run's job recorded in its ``robustness.job.json``.
"""
from __future__ import annotations

import io
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext, redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError

from benchmark.cluster import ClusterProfile, JobShape, pack_runs
from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec, cache_group
from benchmark.estimates.costs import model_costs
from benchmark.estimates.plan import run_hours
from benchmark.run.local import preflight
from benchmark.run.pending import Outcome, pending_runs
from benchmark.run.states import JOB_FILE, JobRecord, add_job_record
from benchmark.run.store import STAGE_FAILURE_FILE, STAGE_JOB_FILE, RunDir, atomic_write_json, read_json
from benchmark.robustness.options import RobustnessOptions
from slurm.jobs import RUNNING_ELSEWHERE, RobustnessJob, RunJob, TaskRun, adapter_paths
from slurm.scheduler import query_jobs
from slurm.snapshot import code_snapshot, snapshot_path

SUBMITIT_CLUSTERS = {"submitit-local": "local", "debug": "debug", "slurm": "slurm"}
SUBMITIT_DIR = ".submitit"


# ---- submitit executors ---------------------------------------------------------------------
@dataclass(frozen=True)
class ArraySubmission:
    """One job array: runs of one job shape, packed into its tasks (one job per task)."""

    shape: JobShape
    tasks: tuple[tuple[RunSpec, ...], ...]
    jobs: tuple[submitit.Job, ...]

    @property
    def specs(self) -> tuple[RunSpec, ...]:
        return tuple(spec for task in self.tasks for spec in task)

    @property
    def job_ids(self) -> list[str]:
        return [job.job_id for job in self.jobs]


@dataclass
class Submission:
    folder: Path  # submitit's folder: pickles and job logs
    arrays: list[ArraySubmission] = field(default_factory=list)
    settled: list[Outcome] = field(default_factory=list)  # not submitted: done, queued, failed before
    snapshot: Path | None = None
    run_dirs: dict[str, Path] = field(default_factory=dict)  # run id → directory, of the submitted runs
    adapter_paths: tuple[Path, ...] = ()  # where the runs' own adapters and trunks import from


def group_by_shape(runs: list[RunSpec], profile: ClusterProfile) -> list[tuple[JobShape, list[RunSpec]]]:
    """One group per job shape (in first-seen order), runs ordered by :func:`benchmark.grid.cache_group`."""
    groups: dict[JobShape, list[RunSpec]] = {}
    for spec in sorted(runs, key=cache_group):
        groups.setdefault(profile.shape_for(spec), []).append(spec)
    return list(groups.items())


def job_spec(spec: RunSpec, device: str | None) -> RunSpec:
    """The spec a job receives: the profile's device (an operational field, so the run id is
    unchanged). Its paths are absolute since the grid was read (:func:`benchmark.grid.absolute_paths`)."""
    return spec.with_overrides(device=device) if device else spec


def make_executor(executor: str, folder: Path, profile: ClusterProfile, job_name: str) -> submitit.AutoExecutor:
    """A submitit executor for ``executor`` ∈ submitit-local | debug | slurm, the cluster named
    explicitly (``AutoExecutor`` would pick SLURM whenever ``srun`` exists)."""
    if executor not in SUBMITIT_CLUSTERS:
        raise ProtobenchError(f"unknown executor {executor!r}; choose local, {', '.join(SUBMITIT_CLUSTERS)}")
    if executor == "slurm" and not (shutil.which("sbatch") and shutil.which("srun")):
        raise ProtobenchError("--executor slurm needs SLURM's commands (sbatch, srun) on PATH; submit from a "
                              "node of the cluster, or use --executor submitit-local to run the jobs here")
    ex = submitit.AutoExecutor(folder=folder, cluster=SUBMITIT_CLUSTERS[executor],
                               slurm_max_num_timeout=profile.max_requeues)
    ex.update_parameters(name=job_name, **profile.slurm_parameters())
    return ex


def submit_runs(grid: GridSpec, runs: list[RunSpec], runs_root: Path, cache_root: Path, *, executor: str,
                profile: ClusterProfile, device: str | None = None, retry_failed: bool = False,
                rerun_stale: bool = False, allow_code_change: bool = False,
                tensorboard_root: Path | None = None) -> Submission:
    """Submit the runs still to do as one job array per job shape; record each run's job in
    its directory (``job.json``). ``device`` (e.g. the profile's) replaces the runs' device;
    ``tensorboard_root`` as in :func:`run_local`."""
    todo, settled = pending_runs(grid, runs, runs_root, retry_failed=retry_failed, rerun_stale=rerun_stale,
                                 ask=query_jobs)
    runs_root = runs_root.resolve()
    result = Submission(runs_root / SUBMITIT_DIR / grid.name, settled=settled)
    if not todo:
        return result
    preflight(todo)
    costs = model_costs(profile.device_model)  # the plan's estimate decides how many runs fit in a task
    cache_root = cache_root.resolve()
    board = tensorboard_root.resolve() if tensorboard_root else None

    def call(task: tuple[RunSpec, ...]) -> RunJob:
        return RunJob(tuple(TaskRun(spec, grid.run_dir(runs_root, spec), grid.run_dir(board, spec) if board else None)
                            for spec in task), cache_root, result.snapshot, allow_code_change=allow_code_change,
                      adapter_paths=result.adapter_paths)

    _submit_arrays(grid, todo, runs_root, result, executor=executor, profile=profile,
                   job_name=f"protobench-{grid.name}", hours=lambda spec: run_hours(costs, spec, profile)[0],
                   call=call, in_job=lambda spec: job_spec(spec, device))
    return result


def submit_stage(grid: GridSpec, runs: list[RunSpec], runs_root: Path, options: RobustnessOptions, *, executor: str,
                 profile: ClusterProfile, retry_failed: bool = False) -> Submission:
    """Submit the robustness stage of the grid's finished runs still to score
    (benchmark/robustness/grid_stage.py) as one job array per job shape, packed as ``run`` packs
    training runs but by the stage's estimated hours; record each run's job in
    ``robustness.job.json``. The jobs run on the runs' checkpoints, in the code snapshot as ``run``'s."""
    from benchmark.robustness.cost import robustness_seconds
    from benchmark.robustness.grid_stage import pending_stage

    todo, settled = pending_stage(grid, runs, runs_root, options, retry_failed=retry_failed, ask=query_jobs)
    runs_root = runs_root.resolve()
    result = Submission(runs_root / SUBMITIT_DIR / f"{grid.name}-robustness", settled=settled)
    if not todo:
        return result
    model = model_costs(profile.device_model).model

    def call(task: tuple[RunSpec, ...]) -> RobustnessJob:
        return RobustnessJob(tuple(grid.run_dir(runs_root, spec) for spec in task), options, result.snapshot,
                             adapter_paths=result.adapter_paths)

    _submit_arrays(grid, todo, runs_root, result, executor=executor, profile=profile,
                   job_name=f"protobench-{grid.name}-robustness",
                   hours=lambda spec: sum(robustness_seconds(spec, options, model).values()) / 3600,
                   call=call, job_file=STAGE_JOB_FILE)
    return result


def _submit_arrays(grid: GridSpec, todo: list[RunSpec], runs_root: Path, result: Submission, *, executor: str,
                   profile: ClusterProfile, job_name: str, hours: Callable[[RunSpec], float],
                   call: Callable[[tuple[RunSpec, ...]], RunJob | RobustnessJob],
                   in_job: Callable[[RunSpec], RunSpec] = lambda spec: spec, job_file: str = JOB_FILE) -> None:
    """What ``run`` and the robustness stage share: ``todo`` (absolute ``runs_root``) as one job array per
    job shape, packed into tasks by their estimated ``hours`` (each spec as ``in_job`` hands it to the
    job), each task the job ``call`` makes of it, in the code snapshot of a SLURM profile that keeps
    one; each array recorded in ``result`` and each run's job in its ``job_file``."""
    result.snapshot = snapshot_path(runs_root) if executor == "slurm" and profile.snapshot else None
    ex = make_executor(executor, result.folder, profile, job_name=job_name)
    if result.snapshot and profile.setup:  # the profile's lines run where the user submitted, as written
        ex.update_parameters(slurm_setup=[f"cd {shlex.quote(str(Path.cwd()))}", *profile.setup,
                                          f"cd {shlex.quote(str(result.snapshot))}"])
    result.adapter_paths = adapter_paths(todo)  # recorded in each job record: the reading commands' PYTHONPATH hint
    with code_snapshot(result.snapshot) if result.snapshot else nullcontext():
        for shape, specs in group_by_shape(todo, profile):
            ex.update_parameters(**shape.submitit_parameters())
            tasks = [tuple(in_job(spec) for spec in task) for task in pack_runs(specs, profile, hours)]
            try:
                jobs = _submit_array(ex, [call(task) for task in tasks], shape, profile, result)
            except ProtobenchError:
                if result.snapshot and not result.arrays:  # no job will ever import it
                    shutil.rmtree(result.snapshot, ignore_errors=True)
                raise
            array = ArraySubmission(shape, tuple(tasks), tuple(jobs))
            result.run_dirs.update((spec.run_id, grid.run_dir(runs_root, spec)) for spec in array.specs)
            _record(grid, runs_root, array, executor, result, profile, job_file)
            result.arrays.append(array)


def _submit_array(ex: submitit.AutoExecutor, calls: list[RunJob] | list[RobustnessJob], shape: JobShape,
                  profile: ClusterProfile, submission: Submission) -> list[submitit.Job]:
    """Submit ``calls`` as one job array. A refusal (sbatch's exit status, or output without a
    job id) → one ProtobenchError quoting sbatch; submitit's pickles and submission script of
    the refused array are removed, and nothing is recorded in the run directories."""
    folder = submission.folder
    before = set(folder.iterdir()) if folder.is_dir() else set()
    said = io.StringIO()  # submitit prints sbatch's stderr itself before raising it
    try:
        with redirect_stderr(said), ex.batch():
            jobs = [ex.submit(call) for call in calls]
    except (FailedJobError, FailedSubmissionError, OSError) as err:
        for leftover in set(folder.iterdir()) - before if folder.is_dir() else ():
            if leftover.is_file() or leftover.is_symlink():
                leftover.unlink()
        reason = str(err).strip() or said.getvalue().strip() or type(err).__name__
        runs = sum(len(call.runs) for call in calls)
        message = (f"submitting the job array of {runs} run(s) ({shape.describe()}) failed:\n{reason}\n"
                   f"nothing of this array was queued; fix the cluster profile {profile.source} "
                   "(partition, account, qos, constraint, [sbatch] flags) and run again")
        if submission.arrays:
            ids = ", ".join(array.job_ids[0].split("_")[0] for array in submission.arrays)
            message += (f"\n{len(submission.arrays)} earlier array(s) were queued and recorded (job {ids}); "
                        "running again submits only the runs not queued yet")
        raise ProtobenchError(message) from err
    sys.stderr.write(said.getvalue())
    return jobs


def _record(grid: GridSpec, runs_root: Path, array: ArraySubmission, executor: str, submission: Submission,
            profile: ClusterProfile, job_file: str = JOB_FILE) -> None:
    """Write each run's job record in ``job_file`` and (a training submission) its spec, so status lists
    it while queued."""
    submitted = time.strftime("%Y-%m-%dT%H:%M:%S")
    for specs, job in zip(array.tasks, array.jobs):
        array_id, _, task = job.job_id.partition("_")
        in_array = executor == "slurm" and task.isdigit()  # local and debug job ids are no arrays
        for position, spec in enumerate(specs):
            rd = RunDir(grid.run_dir(runs_root, spec))
            if job_file == JOB_FILE:
                atomic_write_json(rd.spec_path, spec.to_json())
            add_job_record(rd.path, JobRecord(
                executor=executor, job_id=job.job_id, submitted=submitted, submitit_folder=str(submission.folder),
                array_job_id=array_id if in_array else "", array_task_id=int(task) if in_array else None,
                snapshot=str(submission.snapshot or ""), profile=profile.source,
                task_position=position, task_runs=len(specs),
                adapter_paths=tuple(str(path) for path in submission.adapter_paths),
            ), job_file)


def wait_for(submission: Submission) -> list[Outcome]:
    """Block until every job of a submitit-local/debug submission ends; one outcome per run (a
    failed task's runs each from their own directory: done, failed, or cut short)."""
    outcomes = []
    for array in submission.arrays:
        for specs, job in zip(array.tasks, array.jobs):
            try:
                answers, error = job.result(), ""
            except Exception as err:  # the job's traceback is in its submitit log and failure.json
                lines = str(err).strip().splitlines()
                answers, error = {}, lines[-1] if lines else type(err).__name__
            outcomes.extend(_outcome(spec, answers.get(spec.run_id, {}), RunDir(submission.run_dirs[spec.run_id]),
                                     error) for spec in specs)
    return outcomes


def wait_for_stage(submission: Submission, options: RobustnessOptions) -> list[Outcome]:
    """Block until every job of a submitit-local/debug robustness submission ends; one outcome per run:
    done when its result holds the stage's scores, else failed (why: its ``robustness.failure.json``, or
    the task's error)."""
    from benchmark.robustness.grid_stage import scored_with

    outcomes = []
    for array in submission.arrays:
        for specs, job in zip(array.tasks, array.jobs):
            try:
                job.result()
                error = ""
            except Exception as err:  # the job's traceback is in its submitit log
                lines = str(err).strip().splitlines()
                error = lines[-1] if lines else type(err).__name__
            for spec in specs:
                rd = RunDir(submission.run_dirs[spec.run_id])
                if scored_with(rd.result(), options):
                    outcomes.append(Outcome(spec, "done"))
                    continue
                failure = read_json(rd.path / STAGE_FAILURE_FILE)
                outcomes.append(Outcome(spec, "failed", failure.get("reason", error) if isinstance(failure, dict)
                                        else error or "the job ended without scoring it"))
    return outcomes


def _outcome(spec: RunSpec, answer: dict[str, str], rd: RunDir, task_error: str) -> Outcome:
    """A run's outcome from its task's answer, or (the task failed) from its directory."""
    if answer.get("state") == RUNNING_ELSEWHERE:
        return Outcome(spec, "running-elsewhere", answer.get("holder", ""))
    if answer.get("state") == "done" or rd.is_complete:
        return Outcome(spec, "done")
    failure = rd.failure()
    return Outcome(spec, "failed", failure["reason"] if failure else task_error)
