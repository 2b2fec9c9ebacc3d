"""Where each run stands, from its directory and, for a job submitted to SLURM, the scheduler's
answer (passed in: this module asks nothing of SLURM itself).

``<run_dir>/job.json`` lists every submission of the run (executor, job id, array id,
submission time, submitit folder, code snapshot, its place in a packed task); ``<run_dir>/attempt.json``
is written by the job each time it starts the run (``slurm.jobs.RunJob``); ``cancelled.json`` by
``protobench cancel``. The local executor (:mod:`benchmark.run.local`), ``status``, ``cancel`` and
the SLURM executors read them here.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmark.run.store import RunDir, atomic_write_json, read_json

#: a scheduler's answer about job ids (``slurm.scheduler.query_jobs``): id → its JobState, which has
#: ``state``, ``reason``, ``restarts`` and ``live``; an id it no longer knows is absent
AskScheduler = Callable[[list[str]], Mapping[str, Any]]
JobState = Any  # slurm.scheduler.JobState (benchmark imports nothing of slurm)

JOB_FILE = "job.json"
ATTEMPT_FILE = "attempt.json"
CANCELLED_FILE = "cancelled.json"  # written by `protobench cancel`: the job it cancelled, and when


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
    # the sys.path entries the job imports the runs' own adapters and trunks from (slurm.jobs.adapter_paths)
    adapter_paths: tuple[str, ...] = ()

    @property
    def log_paths(self) -> tuple[Path, Path]:
        folder = Path(self.submitit_folder)
        return folder / f"{self.job_id}_0_log.out", folder / f"{self.job_id}_0_log.err"


_JOB_FIELD_TYPES = {name: (str,) for name in ("executor", "job_id", "submitted", "submitit_folder")} | {
    "array_job_id": (str,), "array_task_id": (int, type(None)), "snapshot": (str,), "profile": (str,),
    "task_position": (int,), "task_runs": (int,), "adapter_paths": (list,)}


def _job_record(entry: object) -> JobRecord | None:
    """A ``job.json`` entry as a JobRecord; None when it is not one the suite wrote (a required
    field missing or of another type). Unknown keys are left out, never passed on."""
    if not isinstance(entry, dict) or not all(name in entry for name in ("executor", "job_id", "submitted",
                                                                       "submitit_folder")):
        return None
    known = {name: value for name, value in entry.items() if name in _JOB_FIELD_TYPES}
    if any(isinstance(value, bool) or not isinstance(value, _JOB_FIELD_TYPES[name]) for name, value in known.items()):
        return None
    if not all(isinstance(path, str) for path in known.get("adapter_paths", [])):
        return None
    return JobRecord(**{**known, "adapter_paths": tuple(known.get("adapter_paths", ()))})


def job_records(run_dir: Path, file: str = JOB_FILE) -> list[JobRecord]:
    """The run's submissions (``file``: ``job.json``, or the robustness stage's), oldest first; an entry
    that is not a job record is skipped (a hostile or damaged file costs that run its job history,
    never the grid)."""
    submissions = (read_json(run_dir / file) or {}).get("submissions", [])
    records = [_job_record(entry) for entry in submissions] if isinstance(submissions, list) else []
    return [record for record in records if record is not None]


def latest_job(run_dir: Path, file: str = JOB_FILE) -> JobRecord | None:
    records = job_records(run_dir, file)
    return records[-1] if records else None


def add_job_record(run_dir: Path, record: JobRecord, file: str = JOB_FILE) -> None:
    """Append a submission to ``file`` (``job.json``; only the submitting process writes it)."""
    entries = [{**asdict(r), "adapter_paths": list(r.adapter_paths)} for r in (*job_records(run_dir, file), record)]
    atomic_write_json(run_dir / file, {"submissions": entries})


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


def record_cancelled(run_dir: Path, job: JobRecord, file: str = CANCELLED_FILE) -> None:
    """Mark the run's job as cancelled by the user: the run then reads ``cancelled`` (not
    failed) and a plain ``protobench run`` submits it again (``file``: the robustness stage's own,
    for its jobs)."""
    atomic_write_json(run_dir / file, {"job_id": job.job_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})


def was_cancelled(run_dir: Path, job: JobRecord, file: str = CANCELLED_FILE) -> bool:
    """Whether ``job`` is the run's job ``protobench cancel`` cancelled last."""
    return (read_json(run_dir / file) or {}).get("job_id") == job.job_id


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
    if was_cancelled(rd.path, job):  # by `protobench cancel`, pending or running: not a failure
        return RunState("cancelled", live=False, failed=False, job=job)
    if state == "failed":  # the run recorded its own failure (failure.json holds the reason)
        return RunState("failed", live=False, failed=True, job=job)
    if scheduler is None:
        return RunState(f"failed (job {job.job_id} ended without a result; SLURM no longer knows it)",
                        live=False, failed=True, job=job)
    why = f"{scheduler.state}, {scheduler.reason}" if scheduler.reason else scheduler.state
    return RunState(f"failed ({why})", live=False, failed=True, job=job)


def run_states(run_dirs: list[RunDir], ask: AskScheduler | None) -> dict[Path, RunState]:
    """The state of every run directory, asking the scheduler (``ask``: ``slurm.scheduler.query_jobs``)
    once about the unfinished runs submitted to SLURM; it is asked nothing when no such run exists.
    Without ``ask`` (a caller that cannot reach SLURM) such a run reads as SLURM's answer of none."""
    jobs = [(rd, latest_job(rd.path)) for rd in run_dirs]
    asked = [job.job_id for rd, job in jobs if job and job.executor == "slurm" and not rd.is_complete]
    answers = ask(asked) if asked and ask is not None else {}
    return {rd.path: merge_state(rd, job, answers.get(job.job_id) if job else None) for rd, job in jobs}
