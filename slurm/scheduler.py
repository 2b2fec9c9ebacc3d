"""What SLURM says about jobs: states, reasons and restart counts, and ``scancel``.

``scontrol show job`` answers for queued and running jobs and for ended ones during the
cluster's ``MinJobAge``; ``sacct`` answers for older ones where the cluster keeps accounting.
Jobs neither knows are left out of the answer.
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from benchmark.errors import ProtobenchError

# States in which a job may still run (a requeued or preempted job comes back as PENDING).
LIVE_STATES = frozenset({
    "PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
    "SUSPENDED", "RESIZING", "PREEMPTED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "SPECIAL_EXIT",
})
SLURM_COMMANDS = ("sbatch", "scontrol", "scancel")
TIMEOUT_S = 60


@dataclass(frozen=True)
class JobState:
    """One job (or array task) as the scheduler reports it."""

    job_id: str  # "123" or "123_4" for array task 4
    state: str  # SLURM's JobState, e.g. PENDING, RUNNING, COMPLETED, CANCELLED, OUT_OF_MEMORY
    reason: str = ""  # why it is pending or why it ended ("None" is dropped)
    restarts: int = 0  # requeues so far (scontrol's Restarts)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


def slurm_available() -> bool:
    return all(shutil.which(c) for c in SLURM_COMMANDS)


def require_slurm() -> None:
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        raise ProtobenchError(f"SLURM commands not found on PATH ({', '.join(missing)}); run this on a login "
                              "node of the cluster, or use --executor submitit-local")


def _task_ids(spec: str) -> list[str]:
    """Expand scontrol's ArrayTaskId ("3", "2-5%2", "1,4-6", "0-8:4") to task ids."""
    ids: list[str] = []
    for part in spec.split("%", 1)[0].split(","):
        span, _, step = part.partition(":")
        low, _, high = span.partition("-")
        ids.extend(str(i) for i in range(int(low), int(high or low) + 1, int(step or 1)))
    return ids


def parse_scontrol(text: str) -> list[JobState]:
    """Jobs in the output of ``scontrol show job -o`` (one record per line; a pending array
    remainder stands for each of its task ids)."""
    jobs = []
    for line in text.splitlines():
        kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "JobState" not in kv:
            continue
        reason = kv.get("Reason", "")
        common = {"state": kv["JobState"], "reason": "" if reason == "None" else reason,
                  "restarts": int(kv.get("Restarts", "0") or 0)}
        if "ArrayJobId" in kv and "ArrayTaskId" in kv:
            jobs.extend(JobState(f"{kv['ArrayJobId']}_{task}", **common) for task in _task_ids(kv["ArrayTaskId"]))
        else:
            jobs.append(JobState(kv["JobId"], **common))
    return jobs


def parse_sacct(text: str) -> list[JobState]:
    """Jobs in ``sacct -X -n -P -o JobID,State`` output ("CANCELLED by 0" → CANCELLED)."""
    jobs = []
    for line in text.splitlines():
        job_id, _, state = line.partition("|")
        if not job_id or "." in job_id or "[" in job_id:
            continue  # job steps and not-yet-split array remainders
        jobs.append(JobState(job_id, state.split()[0] if state.strip() else "UNKNOWN"))
    return jobs


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise ProtobenchError(f"`{' '.join(command)}` did not answer within {TIMEOUT_S} s; is slurmctld up?") from err


def query_jobs(job_ids: Iterable[str]) -> dict[str, JobState]:
    """States of ``job_ids`` ("123" or "123_4"), by id; ids SLURM no longer knows are absent."""
    require_slurm()
    wanted = set(job_ids)
    found: dict[str, JobState] = {}
    for array_id in sorted({j.split("_", 1)[0] for j in wanted}):
        # one call per array: it lists every task, split off or still pending
        out = _run(["scontrol", "show", "job", "-o", array_id])
        if out.returncode != 0 and "Invalid job id" not in out.stderr:  # not "forgotten": SLURM did not answer
            raise ProtobenchError(f"`scontrol show job {array_id}` failed: {out.stderr.strip()}")
        found.update((j.job_id, j) for j in parse_scontrol(out.stdout) if j.job_id in wanted)
    missing = sorted({j.split("_", 1)[0] for j in wanted - set(found)})
    if missing and shutil.which("sacct"):
        command = ["sacct", "-X", "-n", "-P", "-o", "JobID,State"]
        for array_id in missing:
            command += ["-j", array_id]
        out = _run(command)
        if out.returncode == 0:  # clusters without accounting answer with an error
            found.update((j.job_id, j) for j in parse_sacct(out.stdout) if j.job_id in wanted and j.job_id not in found)
    return found


def cancel_jobs(job_ids: list[str]) -> None:
    """``scancel`` the given jobs / array tasks."""
    require_slurm()
    if not job_ids:
        return
    out = _run(["scancel", *job_ids])
    if out.returncode != 0:
        raise ProtobenchError(f"scancel failed: {out.stderr.strip() or out.stdout.strip()}")
