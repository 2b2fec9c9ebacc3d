"""Which runs of a grid are pending and which are settled (done, stale, failed, queued or running
elsewhere), what every executor shares (``run``, the SLURM executors) and ``plan`` previews; read
without torch."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark.config import RunSpec
from benchmark.grid import GridSpec
from benchmark.run.identity import discard_stale, stale_result
from benchmark.run.states import AskScheduler, run_states
from benchmark.run.store import RunBusy, RunDir


@dataclass(frozen=True)
class Outcome:
    spec: RunSpec
    state: str  # "done" | "skipped" | "failed" | "skipped-failed" | "queued" (pending or running in SLURM)
    #           | "skipped-stale" (a result the current code would not give: --rerun-stale)
    #           | "running-elsewhere" (another live process holds the run's lock)
    #           | "untrained" (the robustness stage's: no result to score yet, benchmark/robustness/grid_stage.py)
    detail: str = ""

    @property
    def failed(self) -> bool:
        """The run has no result because it failed, now or in an earlier invocation."""
        return self.state in ("failed", "skipped-failed")


def pending_runs(grid: GridSpec, runs: list[RunSpec], runs_root: Path, *, retry_failed: bool,
                 rerun_stale: bool = False, ask: AskScheduler | None = None,
                 preview: bool = False) -> tuple[list[RunSpec], list[Outcome]]:
    """Split runs into those to execute and those settled: done, stale (benchmark/run/identity.py)
    unless ``rerun_stale``, still pending or running in SLURM, or failed (a failure.json, or a
    SLURM job that ended without a result) unless ``retry_failed``. SLURM is asked (``ask``:
    ``slurm.scheduler.query_jobs``) only about unfinished runs that were submitted to it. A stale result re-run is deleted first (with its
    checkpoint and epoch log; an earlier version's run directory as a whole). ``preview`` (``plan``):
    the same split, with nothing on disk touched (no temporary file removed, no stale result deleted)."""
    if preview and rerun_stale:
        raise ValueError("a preview deletes nothing: it cannot re-run stale results")
    dirs = [RunDir(grid.run_dir(runs_root, spec)) for spec in runs]
    states = run_states(dirs, ask)
    todo, settled = [], []
    for spec, rd in zip(runs, dirs):
        if not preview:
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
