"""Runs as scheduler jobs: the submitted callable, the job records kept in run directories,
and the state of a run seen from both sides (its directory and the scheduler).

``<run_dir>/job.json`` lists every submission of the run (executor, job id, array id,
submission time, submitit folder, code snapshot, its place in a packed task); ``<run_dir>/attempt.json``
is written by the job each time it starts the run (job id, SLURM_RESTART_COUNT, host, the code
directory it imported, its place in the task).
"""
from __future__ import annotations

import importlib
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import submitit

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from slurm.scheduler import JobState, query_jobs
from benchmark.run.store import RunBusy, RunDir, atomic_write_json, read_json

JOB_FILE = "job.json"
ATTEMPT_FILE = "attempt.json"
CANCELLED_FILE = "cancelled.json"  # written by `protobench cancel`: the job it cancelled, and when
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
    from benchmark.backbones import TIMM_PREFIX

    found: dict[Path, None] = {}
    for spec in specs:
        for name in (spec.method, spec.backbone):
            if ":" not in name or name.startswith(TIMM_PREFIX):
                continue
            top = importlib.import_module(name.partition(":")[0].split(".")[0])  # imported by the checks
            if top.__file__ is None:  # a namespace package: its folder lies in the entry
                found[Path(next(iter(top.__path__))).resolve().parent] = None
            else:  # a module file, or a package's __init__.py one level further down
                origin = Path(top.__file__).resolve()
                found[origin.parent.parent if origin.name == "__init__.py" else origin.parent] = None
    return tuple(found)


def code_dir() -> Path:
    """The directory the ``benchmark`` package of this process was imported from."""
    import benchmark

    return Path(benchmark.__file__).resolve().parent.parent


@dataclass(frozen=True)
class JobRecord:
    """One submission of a run."""

    executor: str  # "slurm" | "submitit-local" | "debug"
    job_id: str  # "123_4" for task 4 of array 123
    submitted: str  # ISO time
    submitit_folder: str  # logs: <folder>/<job_id>_0_log.{out,err}
    array_job_id: str = ""
    array_task_id: int | None = None
    snapshot: str = ""  # code snapshot the job imports ("" → the installed code)
    profile: str = ""
    task_position: int = 0  # the run's place among the runs packed into its array task
    task_runs: int = 1  # runs packed into the task (1: the task is this run)

    @property
    def log_paths(self) -> tuple[Path, Path]:
        folder = Path(self.submitit_folder)
        return folder / f"{self.job_id}_0_log.out", folder / f"{self.job_id}_0_log.err"


_JOB_FIELD_TYPES = {name: (str,) for name in ("executor", "job_id", "submitted", "submitit_folder")} | {
    "array_job_id": (str,), "array_task_id": (int, type(None)), "snapshot": (str,), "profile": (str,),
    "task_position": (int,), "task_runs": (int,)}


def _job_record(entry: object) -> JobRecord | None:
    """A ``job.json`` entry as a JobRecord; None when it is not one the suite wrote (a required
    field missing or of another type). Unknown keys are left out, never passed on."""
    if not isinstance(entry, dict) or not all(name in entry for name in ("executor", "job_id", "submitted",
                                                                       "submitit_folder")):
        return None
    known = {name: value for name, value in entry.items() if name in _JOB_FIELD_TYPES}
    if any(isinstance(value, bool) or not isinstance(value, _JOB_FIELD_TYPES[name]) for name, value in known.items()):
        return None
    return JobRecord(**known)


def job_records(run_dir: Path) -> list[JobRecord]:
    """The run's submissions, oldest first; an entry that is not a job record is skipped (a
    hostile or damaged ``job.json`` costs that run its job history, never the grid)."""
    submissions = (read_json(run_dir / JOB_FILE) or {}).get("submissions", [])
    records = [_job_record(entry) for entry in submissions] if isinstance(submissions, list) else []
    return [record for record in records if record is not None]


def latest_job(run_dir: Path) -> JobRecord | None:
    records = job_records(run_dir)
    return records[-1] if records else None


def add_job_record(run_dir: Path, record: JobRecord) -> None:
    """Append a submission to ``job.json`` (only the submitting process writes this file)."""
    entries = [asdict(r) for r in job_records(run_dir)] + [asdict(record)]
    atomic_write_json(run_dir / JOB_FILE, {"submissions": entries})


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
        imported = code_dir()
        if self.snapshot is not None and imported != self.snapshot.resolve():
            raise ProtobenchError(f"the job imported the suite from {imported}, not from its code snapshot "
                                  f"{self.snapshot}; remove {imported} from PYTHONPATH")
        for path in self.adapter_paths:  # after the suite's own entries: an adapter cannot shadow the snapshot
            if str(path) not in sys.path:
                sys.path.append(str(path))
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
@dataclass(frozen=True)
class RunState:
    """Where a run stands: ``label`` is what ``protobench status`` shows."""

    label: str  # done | pending | running | requeued … | cancelled | failed (REASON) | failed | started | new
    live: bool  # a job of the run may still run: do not submit it again
    failed: bool  # ended without a result: submit again only with --retry-failed
    job: JobRecord | None = None


def _attempt_restarts(run_dir: Path, job: JobRecord) -> int | None:
    """SLURM_RESTART_COUNT recorded by the run's ``attempt.json`` when it comes from ``job``
    (None: from another job, absent or unreadable)."""
    attempt = read_json(run_dir / ATTEMPT_FILE) or {}
    count = attempt.get("restart_count", 0)
    if attempt.get("job_id") != job.job_id or isinstance(count, bool) or not isinstance(count, int):
        return None
    return count


def _restarts(run_dir: Path, job: JobRecord, scheduler: JobState | None) -> int:
    return max(_attempt_restarts(run_dir, job) or 0, scheduler.restarts if scheduler else 0)


def _started_in_this_attempt(run_dir: Path, job: JobRecord, scheduler: JobState) -> bool:
    """The run's ``attempt.json`` comes from the running attempt of its (packed) task: it is the
    task's current run, not one waiting behind it."""
    recorded = _attempt_restarts(run_dir, job)
    return recorded is not None and recorded >= scheduler.restarts


def record_cancelled(run_dir: Path, job: JobRecord) -> None:
    """Mark the run's job as cancelled by the user: the run then reads ``cancelled`` (not
    failed) and a plain ``protobench run`` submits it again."""
    atomic_write_json(run_dir / CANCELLED_FILE, {"job_id": job.job_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})


def _cancelled(run_dir: Path, job: JobRecord) -> bool:
    return (read_json(run_dir / CANCELLED_FILE) or {}).get("job_id") == job.job_id


def merge_state(rd: RunDir, job: JobRecord | None, scheduler: JobState | None) -> RunState:
    """The run's state from its files and (for SLURM jobs) the scheduler's answer, None when
    SLURM no longer knows the job. Asks nothing of SLURM: testable without a cluster."""
    state = rd.state  # one read of the run's files
    if state == "done":
        return RunState("done", live=False, failed=False, job=job)
    if job is None or job.executor != "slurm":
        return RunState(state, live=False, failed=state == "failed", job=job)
    if scheduler is not None and scheduler.live:
        label = "running" if scheduler.state in ("RUNNING", "COMPLETING") else scheduler.state.lower()
        if label == "running" and job.task_runs > 1:  # a packed task runs one of its runs at a time
            if not _started_in_this_attempt(rd.path, job, scheduler):
                label = f"waiting in task {job.job_id} (run {job.task_position + 1} of {job.task_runs})"
            elif state == "failed":  # failed in this attempt; the task goes on with its next run
                return RunState("failed", live=False, failed=True, job=job)
        restarts = _restarts(rd.path, job, scheduler)
        if restarts:
            label += f", requeued {restarts}×"
        return RunState(label, live=True, failed=False, job=job)
    if _cancelled(rd.path, job):  # by `protobench cancel`, pending or running: not a failure
        return RunState("cancelled", live=False, failed=False, job=job)
    if state == "failed":  # the run recorded its own failure (failure.json holds the reason)
        return RunState("failed", live=False, failed=True, job=job)
    if scheduler is None:
        return RunState(f"failed (job {job.job_id} ended without a result; SLURM no longer knows it)",
                        live=False, failed=True, job=job)
    why = f"{scheduler.state}, {scheduler.reason}" if scheduler.reason else scheduler.state
    return RunState(f"failed ({why})", live=False, failed=True, job=job)


def run_states(run_dirs: list[RunDir]) -> dict[Path, RunState]:
    """The state of every run directory, asking SLURM once per array about unfinished runs."""
    jobs = [(rd, latest_job(rd.path)) for rd in run_dirs]
    asked = [job.job_id for rd, job in jobs if job and job.executor == "slurm" and not rd.is_complete]
    answers = query_jobs(asked) if asked else {}
    return {rd.path: merge_state(rd, job, answers.get(job.job_id) if job else None) for rd, job in jobs}
