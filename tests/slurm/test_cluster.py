"""Grids on a real single-node SLURM cluster (slurm/slurm-up.sh): job arrays, requeue after
preemption with exact resumption, scancel reported as a failure, resubmission that submits
nothing, and code snapshots. Uses the running cluster when ``sinfo`` answers, else starts one
(and stops exactly what it started); skipped, with the reason, when SLURM is not installed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest
import submitit

from benchmark.cli import main
from benchmark.cluster import ClusterProfile, load_profile
from benchmark.errors import ProtobenchError
from benchmark.run.pending import pending_runs
from slurm.executors import Submission, make_executor, submit_runs, submit_stage
from benchmark.grid import GridSpec, load_grid
from benchmark.robustness.grid_stage import pending_stage
from benchmark.robustness.options import RobustnessOptions
from benchmark.run.states import ATTEMPT_FILE, job_records, latest_job, run_states
from slurm.scheduler import query_jobs
from benchmark.run.provenance import code_version
from slurm.snapshot import code_snapshot
from benchmark.run.store import STAGE_JOB_FILE, RunDir, find_run_dirs

import support
from support import assert_same_metrics, git, scaled
from tiny_grid import tiny_grid, write_tiny_grid

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "slurm" / "profiles" / "local.toml"
DEADLINE_S = 180  # on an idle 2-core machine; scaled by PROTOBENCH_TEST_TIMEOUT_SCALE
QUEUED_DEADLINE_S = 600  # waits that include time in the queue behind other jobs of a shared test cluster
T = TypeVar("T")


def _answers(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=scaled(20)).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The running cluster, or one started for this session and stopped at its end."""
    started: Path | None = None
    if not _answers(["sinfo", "-h"]):
        if not all(shutil.which(b) or Path(f"/usr/sbin/{b}").exists() for b in ("sbatch", "slurmctld", "slurmd", "munged")):
            pytest.skip("slurm binaries not found: install slurm-wlm and munge "
                        "(apt-get install -y slurm-wlm munge, as .ci/run does)")
        if os.geteuid() != 0:
            pytest.skip("no SLURM cluster answers and starting one (slurm/slurm-up.sh) needs root")
        started = tmp_path_factory.mktemp("slurm-state")
        env = {**os.environ, "PROTOBENCH_SLURM_STATE": str(started)}
        up = subprocess.run([str(REPO / "slurm" / "slurm-up.sh")], env=env, capture_output=True, text=True)
        if up.returncode != 0:
            pytest.fail(f"slurm/slurm-up.sh failed:\n{up.stdout}\n{up.stderr}")
    path = os.environ["PATH"]
    if not _answers(["sacct", "-n", "-j", "1"]):  # no accounting: submitit's own waits need the stand-in
        os.environ["PATH"] = f"{REPO / 'slurm' / 'bin'}{os.pathsep}{path}"
    try:
        yield
    finally:
        os.environ["PATH"] = path
        if started is not None:
            subprocess.run([str(REPO / "slurm" / "slurm-down.sh")],
                           env={**os.environ, "PROTOBENCH_SLURM_STATE": str(started)}, check=False)


@pytest.fixture(scope="module")
def profile(slurm_cluster: None) -> ClusterProfile:
    return load_profile(PROFILE)


def squeue() -> str:
    return subprocess.run(["squeue"], capture_output=True, text=True).stdout


def wait_until(predicate: Callable[[], T], what: str, deadline_s: float = DEADLINE_S,
               progress: Callable[[], object] | None = None) -> T:
    """Poll ``predicate`` until it is truthy; fail with the queue's state at the (scaled) deadline
    (counted from the last change of ``progress``, when given)."""
    return support.wait_until(predicate, what, deadline_s, poll_s=1.0, context=lambda: f"squeue:\n{squeue()}",
                              progress=progress)


def job_log(rd: RunDir) -> str:
    job = latest_job(rd.path)
    if job is None:
        return "(no job record)"
    return "\n".join(p.read_text()[-3000:] for p in job.log_paths if p.exists())


def results(grid: GridSpec, runs_root: Path) -> Callable[[], bool]:
    """A predicate: every run has its result; fails at once when a run's job failed."""
    dirs = [RunDir(grid.run_dir(runs_root, spec)) for spec in grid.runs]

    def all_done() -> bool:
        for rd, state in run_states(dirs, query_jobs).items():
            if state.failed:
                pytest.fail(f"run {rd.name} {state.label}: {(RunDir(rd).failure() or {}).get('reason', '')}\n"
                            f"{job_log(RunDir(rd))}")
        return all(rd.is_complete for rd in dirs)

    return all_done


SUBMITTED: list[str] = []  # every job id the tests queued


@pytest.fixture(autouse=True)
def cancel_leftover_jobs() -> Iterator[None]:
    """Jobs a test queued are cancelled when it ends: one that failed while they still ran
    (a deadline passed) would otherwise hold the cluster's GPUs from the tests after it."""
    before = len(SUBMITTED)
    yield
    if SUBMITTED[before:]:
        subprocess.run(["scancel", *SUBMITTED[before:]], capture_output=True, timeout=scaled(60))


def submit(grid: GridSpec, runs_root: Path, cache_root: Path, profile: ClusterProfile, **kw: bool) -> Submission:
    submission = submit_runs(grid, list(grid.runs), runs_root, cache_root, executor="slurm", profile=profile,
                             device=profile.device, **kw)
    SUBMITTED.extend(job_id for array in submission.arrays for job_id in array.job_ids)
    return submission


# ---- a grid as one job array ----------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_grid(profile: ClusterProfile, tmp_path_factory: pytest.TempPathFactory) -> tuple[GridSpec, Path, Submission]:
    root = tmp_path_factory.mktemp("slurm-grid")
    grid = tiny_grid("tiny", root / "data", epochs=2, js=(2, 3))
    submission = submit(grid, root / "runs", root / "cache", profile)
    wait_until(results(grid, root / "runs"), "every run of the tiny grid to write its result")
    return grid, root / "runs", submission


def test_grid_runs_as_one_job_array_and_writes_every_result(finished_grid: tuple[GridSpec, Path, Submission]) -> None:
    grid, runs_root, submission = finished_grid
    assert len(submission.arrays) == 1
    ids = submission.arrays[0].job_ids
    assert len(ids) == 2 and len({i.split("_")[0] for i in ids}) == 1, ids  # one array, two tasks
    for spec in grid.runs:
        rd = RunDir(grid.run_dir(runs_root, spec))
        assert rd.result()["run_id"] == spec.run_id
        job = latest_job(rd.path)
        assert job.executor == "slurm" and job.job_id in ids and job.array_job_id == ids[0].split("_")[0]
        assert Path(job.submitit_folder) == submission.folder and job.snapshot == str(submission.snapshot)
    states = run_states(find_run_dirs(runs_root / grid.name), query_jobs)
    assert {s.label for s in states.values()} == {"done"}


def test_status_shows_the_finished_grid(finished_grid: tuple[GridSpec, Path, Submission],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    grid, runs_root, _ = finished_grid
    assert main(["status", str(runs_root / grid.name)]) == 0
    assert "2 runs: 2 done" in capsys.readouterr().out


def test_jobs_import_the_code_snapshot_not_the_checkout(finished_grid: tuple[GridSpec, Path, Submission]) -> None:
    grid, runs_root, submission = finished_grid
    assert submission.snapshot is not None and submission.snapshot.parent == runs_root.resolve() / ".snapshots"
    assert (submission.snapshot / "slurm" / "jobs.py").is_file()
    assert not (submission.snapshot / "tests").exists()  # fixture runs would pollute `protobench report`
    source = json.loads((submission.snapshot / ".protobench-snapshot" / "source.json").read_text())
    assert source["commit"] == git(REPO, "rev-parse", "HEAD").strip()
    for spec in grid.runs:
        attempt = json.loads((grid.run_dir(runs_root, spec) / ATTEMPT_FILE).read_text())
        assert attempt["code_dir"] == str(submission.snapshot)
        # the checkout's version, not that of the snapshot directory (which has no git)
        assert RunDir(grid.run_dir(runs_root, spec)).result()["provenance"]["code_version"] == source["code_version"]
    described = git(REPO, "describe", "--always", "--tags", "--dirty").strip()  # git's own name: the oracle
    assert source["code_version"] == described or source["code_version"].startswith(f"{described}+")
    assert source["code_version"] == code_version(REPO)


def test_resubmitting_a_finished_grid_submits_nothing(finished_grid: tuple[GridSpec, Path, Submission],
                                                      profile: ClusterProfile) -> None:
    grid, runs_root, _ = finished_grid
    again = submit(grid, runs_root, runs_root.parent / "cache", profile)
    assert again.arrays == [] and again.snapshot is None
    assert [o.state for o in again.settled] == ["skipped", "skipped"]


def test_the_robustness_stage_of_the_finished_grid_runs_as_a_job_array(
        finished_grid: tuple[GridSpec, Path, Submission], profile: ClusterProfile) -> None:
    grid, runs_root, _ = finished_grid
    options = RobustnessOptions(("misalignment",), steps=2, images=2, batch_size=2)
    submission = submit_stage(grid, list(grid.runs), runs_root, options, executor="slurm", profile=profile)
    SUBMITTED.extend(job_id for array in submission.arrays for job_id in array.job_ids)
    assert len(submission.arrays) == 1 and submission.snapshot is not None
    dirs = [RunDir(grid.run_dir(runs_root, spec)) for spec in grid.runs]

    def scored() -> bool:  # fails at once when a stage job ended without scoring its run
        todo, settled = pending_stage(grid, list(grid.runs), runs_root, options, ask=query_jobs)
        for outcome in settled:
            if outcome.failed:
                job = latest_job(grid.run_dir(runs_root, outcome.spec), STAGE_JOB_FILE)
                logs = "\n".join(p.read_text()[-3000:] for p in job.log_paths if p.exists()) if job else ""
                pytest.fail(f"the stage on {outcome.spec.run_id}: {outcome.detail}\n{logs}")
        return not todo and all(o.state == "skipped" for o in settled)

    wait_until(scored, "the robustness stage to score every run of the tiny grid", QUEUED_DEADLINE_S)
    for rd, job_id in zip(dirs, submission.arrays[0].job_ids):
        (record,) = job_records(rd.path, STAGE_JOB_FILE)
        assert record.executor == "slurm" and record.job_id == job_id and record.array_task_id is not None
    again = submit_stage(grid, list(grid.runs), runs_root, options, executor="slurm", profile=profile)
    assert again.arrays == [] and [o.state for o in again.settled] == ["skipped", "skipped"]


# ---- preemption -------------------------------------------------------------------------------
def finished_epochs(rd: RunDir) -> int:
    import torch

    try:
        return int(torch.load(rd.checkpoint_path, map_location="cpu", weights_only=True)["global_epoch"])
    except Exception:  # absent, or being replaced
        return 0


def restart_count(rd: RunDir) -> int:
    attempt = rd.path / ATTEMPT_FILE
    return json.loads(attempt.read_text())["restart_count"] if attempt.exists() else 0


def test_preempted_job_resumes_and_matches_an_uninterrupted_run(profile: ClusterProfile, tmp_path: Path) -> None:
    """Requeued twice mid-training: from outside (``scontrol requeue``, as SLURM preemption
    does) and through submitit's own handler (SIGUSR2: checkpoint, requeue, exit)."""
    grid = tiny_grid("long", tmp_path / "data", epochs=300)  # ≈ 30 s of training on an idle 2-core machine
    preempted_root, reference_root = tmp_path / "preempted", tmp_path / "reference"
    preempted = submit(grid, preempted_root, tmp_path / "cache", profile)
    submit(grid, reference_root, tmp_path / "cache", profile)
    rd = RunDir(grid.run_dir(preempted_root, grid.runs[0]))
    job_id = preempted.arrays[0].job_ids[0]

    wait_until(lambda: finished_epochs(rd) >= 1, "the first finished epoch in checkpoint.pt")
    tic = time.monotonic()
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    assert "requeued 1×" in wait_until(lambda: run_states([rd], query_jobs)[rd.path].label, "a state")
    wait_until(lambda: restart_count(rd) >= 1, "the requeued job to start again")
    round_trip = time.monotonic() - tic
    resumed_at = finished_epochs(rd)
    wait_until(lambda: finished_epochs(rd) > resumed_at, "an epoch after the restart")
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)  # what SLURM sends before preempting
    wait_until(lambda: restart_count(rd) >= 2, "the job requeued by submitit's signal handler to start again")
    reference_rd = RunDir(grid.run_dir(reference_root, grid.runs[0]))
    # 300 epochs take 30 s on an idle machine and far longer on a busy one: wait while they advance
    wait_until(results(grid, preempted_root), "the preempted run's result", progress=lambda: finished_epochs(rd))
    wait_until(results(grid, reference_root), "the uninterrupted run's result",
               progress=lambda: finished_epochs(reference_rd))

    result = rd.result()
    reference = reference_rd.result()
    assert rd.log_path.read_text().count("resuming at") == 2, f"the job ended before a requeue:\n{job_log(rd)}"
    assert not rd.failure_path.exists()
    assert result["metrics"] == reference["metrics"]
    assert reference["timing"]["resumed_from_epoch"] == 0
    print(f"requeue round trip (scontrol requeue → job running again): {round_trip:.1f} s")


# ---- runs packed per array task ---------------------------------------------------------------
def test_packed_array_runs_two_runs_per_task_and_records_each_run(
        profile: ClusterProfile, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tiny_grid("packed", tmp_path / "data", js=(2, 3), seeds=(0, 1))
    runs_root = tmp_path / "runs"
    submission = submit(grid, runs_root, tmp_path / "cache", replace(profile, runs_per_task=2))
    (array,) = submission.arrays
    assert [len(task) for task in array.tasks] == [2, 2]
    assert len(array.job_ids) == 2 and len({i.split("_")[0] for i in array.job_ids}) == 1  # one array, two tasks
    wait_until(results(grid, runs_root), "every run of the packed array to write its result", QUEUED_DEADLINE_S)
    for task, job_id in zip(array.tasks, array.job_ids):
        for position, spec in enumerate(task):
            rd = RunDir(grid.run_dir(runs_root, spec))
            job = latest_job(rd.path)
            assert (job.job_id, job.task_position, job.task_runs) == (job_id, position, 2)
            attempt = json.loads((rd.path / ATTEMPT_FILE).read_text())
            assert (attempt["job_id"], attempt["task_position"]) == (job_id, position)
    assert main(["status", str(runs_root / grid.name)]) == 0
    assert "4 runs: 4 done" in capsys.readouterr().out


def test_requeued_packed_task_keeps_its_finished_run_and_resumes_the_next(profile: ClusterProfile,
                                                                          tmp_path: Path) -> None:
    """Two runs in one task; while the first trains the second reads as waiting in the task;
    ``scontrol requeue`` during the second: the first is not trained again, the second resumes."""
    # ≈ 20 s of training each on an idle machine: the second run must outlast the requeue's kill
    # grace (KillWait), or it finishes before the task is stopped and there is nothing to resume
    grid = tiny_grid("packed-long", tmp_path / "data", epochs=200, js=(2, 3))
    runs_root = tmp_path / "runs"
    submission = submit(grid, runs_root, tmp_path / "cache", replace(profile, runs_per_task=2))
    ((first_spec, second_spec),) = submission.arrays[0].tasks
    first, second = (RunDir(grid.run_dir(runs_root, s)) for s in (first_spec, second_spec))
    job_id = submission.arrays[0].job_ids[0]

    wait_until(lambda: finished_epochs(first) >= 1, "the first run's first finished epoch", QUEUED_DEADLINE_S)
    assert run_states([second], query_jobs)[second.path].label == f"waiting in task {job_id} (run 2 of 2)"
    wait_until(lambda: finished_epochs(second) >= 1, "the second run's first finished epoch", QUEUED_DEADLINE_S)
    assert first.is_complete and run_states([second], query_jobs)[second.path].label == "running"
    first_log = first.log_path.read_text()
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    wait_until(lambda: restart_count(second) >= 1, "the requeued task to start the second run again",
               QUEUED_DEADLINE_S)
    wait_until(results(grid, runs_root), "both runs' results", progress=lambda: finished_epochs(second))
    assert first.log_path.read_text() == first_log  # skipped by the requeued task: not trained again
    assert "resuming at" in second.log_path.read_text() and second.result()["timing"]["resumed_from_epoch"] >= 1


# ---- cancelled --------------------------------------------------------------------------------
def test_cancelled_runs_read_cancelled_pending_or_running_and_a_plain_run_resubmits_them(
        profile: ClusterProfile, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tiny_grid("cancelled", tmp_path / "data", epochs=200, js=(2, 3, 4))  # 2 tasks run at once, 1 pends
    runs_root = tmp_path / "runs"
    submission = submit(grid, runs_root, tmp_path / "cache", profile)
    dirs = [RunDir(grid.run_dir(runs_root, spec)) for spec in grid.runs]
    wait_until(lambda: any((rd.path / ATTEMPT_FILE).exists() for rd in dirs), "a job to start")
    assert main(["cancel", str(runs_root / grid.name)]) == 0
    assert f"cancelled 3 job(s) of 3 run(s): {' '.join(submission.arrays[0].job_ids)}" in capsys.readouterr().out

    states = wait_until(lambda: (s := run_states(dirs, query_jobs)) and all(not v.live for v in s.values()) and s,
                        "every cancelled run to end", 60)
    assert {state.label for state in states.values()} == {"cancelled"}
    assert main(["status", str(runs_root / grid.name)]) == 0
    out = capsys.readouterr().out
    assert "3 runs: 3 cancelled" in out and "log " not in out
    todo, settled = pending_runs(grid, list(grid.runs), runs_root, retry_failed=False, ask=query_jobs)
    assert todo == list(grid.runs) and settled == []


# ---- code snapshots -----------------------------------------------------------------------------
def test_queued_job_runs_the_code_of_submission_time(profile: ClusterProfile, tmp_path: Path) -> None:
    repo, out = tmp_path / "repo", tmp_path / "value.txt"
    (repo / "tests").mkdir(parents=True)
    (repo / "probe.py").write_text("VALUE = 'committed'\n")
    (repo / "helper.py").write_text("WORD = 'committed'\n")
    (repo / "tests" / "result.json").write_text("{}\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "probe")
    (repo / "probe.py").write_text("from helper import WORD\nVALUE = WORD\n")  # uncommitted edits …
    (repo / "helper.py").write_text("WORD = 'at submission'\n")
    (repo / ".env").write_text("API_TOKEN=secret\n")  # … and an untracked file, which is no code

    executor = make_executor("slurm", tmp_path / "submitit", profile, "snapshot-probe")
    executor.update_parameters(slurm_additional_parameters={"hold": True}, timeout_min=5, slurm_signal_delay_s=0)
    probe = submitit.helpers.CommandFunction(
        [sys.executable, "-c", f"import pathlib, probe; pathlib.Path({str(out)!r}).write_text(probe.VALUE)"])
    with code_snapshot(tmp_path / "snapshot", root=repo) as snapshot:
        job = executor.submit(probe)
    SUBMITTED.append(job.job_id)
    (repo / "helper.py").write_text("WORD = 'edited after submission'\n")
    subprocess.run(["scontrol", "release", job.job_id], check=True)

    assert wait_until(lambda: out.exists() and out.read_text(), "the held probe job's output") == "at submission"
    assert not (snapshot / "tests").exists() and not (snapshot / ".env").exists()


# ---- a submission SLURM refuses -----------------------------------------------------------------
def test_a_bad_partition_is_one_error_quoting_sbatch(profile: ClusterProfile, tmp_path: Path) -> None:
    nope = replace(profile, shape=replace(profile.shape, partition="nope"))
    grid = tiny_grid("refused", tmp_path / "data", js=(2, 3))
    runs_root = tmp_path / "runs"
    with pytest.raises(ProtobenchError, match="invalid partition") as refused:
        submit(grid, runs_root, tmp_path / "cache", nope)
    assert "sbatch: error:" in str(refused.value) and "partition nope" in str(refused.value)
    assert not list(runs_root.rglob("job.json")) and not any((runs_root / ".snapshots").iterdir())


# ---- as a researcher submits: relative paths, an own adapter -----------------------------------


def test_relative_paths_and_an_own_adapter_on_a_relative_pythonpath_run_as_locally(
        profile: ClusterProfile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``PYTHONPATH=contrib protobench run grid.toml --executor slurm`` from the folder holding
    ``contrib/`` and ``data/``: every job finds the data and the adapter, and equals the local run."""
    (tmp_path / "contrib").mkdir()
    shutil.copy(REPO / "tests" / "helpers" / "example_adapter.py", tmp_path / "contrib" / "my_adapter.py")
    write_tiny_grid(tmp_path / "grid.toml", "own", "data/synthbirds", device="cpu", method="my_adapter:CosinePrototypes",
                    method_args={"epochs": 2}, sweep=[{"prototypes_per_class": [2, 3]}])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "contrib")  # what the jobs inherit, relative as the user typed it
    monkeypatch.syspath_prepend("contrib")
    assert main(["run", "grid.toml", "--runs-dir", "local"]) == 0  # generates data/synthbirds here
    assert main(["run", "grid.toml", "--runs-dir", "cluster", "--executor", "slurm", "--profile", str(PROFILE)]) == 0
    dirs = find_run_dirs(tmp_path / "cluster" / "own")
    SUBMITTED.extend(job.job_id for rd in dirs if (job := latest_job(rd.path)))
    assert len(dirs) == 2
    wait_until(results(load_grid("grid.toml"), tmp_path / "cluster"), "both runs of the cluster submission")
    for rd in dirs:
        local = RunDir(tmp_path / "local" / "own" / rd.path.name).result()
        assert_same_metrics(rd.result()["metrics"], local["metrics"])  # within METRIC_RTOL (support.py)
        assert rd.spec()["data_root"] == str(tmp_path / "data" / "synthbirds")
    assert not list((tmp_path / "cluster" / ".snapshots").rglob("synthbirds"))  # no data generated in a snapshot
