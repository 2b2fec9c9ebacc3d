"""Runs packed per array task (``runs_per_task`` in the cluster profile): which runs share a
task, the time budget, each run's job record and state, a packed task's results against
unpacked runs, and a packed task interrupted mid-way then run again (as a requeue does)."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

import benchmark.run.runner
from benchmark.cli import main
from benchmark.cluster import ClusterProfile, load_profile, pack_runs, parse_profile
from benchmark.errors import ProtobenchError
from slurm.executors import group_by_shape, submit_runs, wait_for
from benchmark.grid import GridSpec, cache_group, parse_grid
from benchmark.run.states import ATTEMPT_FILE, JobRecord, job_records, merge_state
from slurm.jobs import RunJob, TaskRun
from benchmark.estimates.costs import model_costs
from benchmark.estimates.plan import make_plan
from slurm.scheduler import JobState
from benchmark.run.store import RunDir, atomic_write_json
from benchmark.run.training import TrainingInterrupted
from tiny_grid import tiny_grid
from support import assert_same_metrics

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "slurm" / "profiles" / "example.toml"


def paper_grid(**sweep: object) -> GridSpec:
    return parse_grid({"name": "g", "defaults": {"dataset": "cub", "data_root": "/nowhere", "method": "vmfproto",
                                                 "backbone": "dinov2_vitb14"},
                       "sweep": [{"prototypes_per_class": [3, 5], "seed": [0, 1], **sweep}]}, source="t")


# ---- which runs share a task ------------------------------------------------------------------
def test_runs_of_one_cache_group_fill_tasks_up_to_runs_per_task() -> None:
    specs = sorted(paper_grid().runs, key=cache_group)
    one_hour = lambda spec: 1.0  # noqa: E731
    sizes = lambda profile: [len(t) for t in pack_runs(specs, profile, one_hour)]  # noqa: E731
    assert sizes(ClusterProfile()) == [1, 1, 1, 1]  # the default: one run per task, as before packing
    assert sizes(ClusterProfile(runs_per_task=2)) == [2, 2]
    assert sizes(ClusterProfile(runs_per_task=3)) == [3, 1]
    tasks = pack_runs(specs, ClusterProfile(runs_per_task=2), one_hour)
    assert [s for task in tasks for s in task] == specs  # cache order kept, every run once


def test_runs_of_different_cache_groups_never_share_a_task() -> None:
    grid = paper_grid(augmentation=["none", "offline40"])  # the training view differs: another entry
    specs = sorted(grid.runs, key=cache_group)
    tasks = pack_runs(specs, ClusterProfile(runs_per_task=8, task_time_budget_min=10_000), lambda s: 1.0)
    assert sorted(len(t) for t in tasks) == [4, 4]
    assert all(len({s.augmentation for s in task}) == 1 for task in tasks)


def test_the_time_budget_bounds_a_tasks_estimated_hours() -> None:
    specs = sorted(paper_grid().runs, key=cache_group)
    hours = {s.run_id: h for s, h in zip(specs, (1.0, 1.0, 1.5, 0.4))}
    budget_2h = ClusterProfile(runs_per_task=4, task_time_budget_min=120)
    assert [len(t) for t in pack_runs(specs, budget_2h, lambda s: hours[s.run_id])] == [2, 2]  # 1+1 | 1.5+0.4
    budget_1h = ClusterProfile(runs_per_task=4, task_time_budget_min=60)
    assert [len(t) for t in pack_runs(specs, budget_1h, lambda s: hours[s.run_id])] == [1, 1, 1, 1]  # 1.5 h alone


def test_default_budget_is_the_time_limit_less_signal_lead_and_start_up() -> None:
    profile = parse_profile({"timeout_min": 240, "signal_delay_s": 180, "task_startup_s": 60, "runs_per_task": 3},
                            source="p", name="p")
    assert profile.task_budget_hours(profile.shape) == pytest.approx((240 * 60 - 180 - 60) / 3600)
    assert parse_profile({"task_time_budget_min": 100}, source="p", name="p").task_budget_hours(profile.shape) \
        == pytest.approx(100 / 60)


@pytest.mark.parametrize("text, needle", [
    ("runs_per_task = 0", "runs_per_task = 0 must be ≥ 1"),
    ("runs_per_task = 1.5", "runs_per_task = 1.5 must be of type int"),
    ("timeout_min = 60\nsignal_delay_s = 120\ntask_time_budget_min = 59",
     "task_time_budget_min = 59 does not fit in timeout_min = 60 less signal_delay_s = 120 s"),
    ("task_time_budget_min = 100\n[backbone.dinov2_vitb14]\ntimeout_min = 90",
     "[backbone.dinov2_vitb14]: task_time_budget_min = 100 does not fit"),
    ("task_startup_s = -1", "task_startup_s = -1 must be ≥ 0"),
])
def test_packing_mistakes_are_one_clear_error(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text + "\n")
    with pytest.raises(ProtobenchError) as err:
        load_profile(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_shipped_example_profile_documents_packing() -> None:
    profile = load_profile(EXAMPLE)
    assert profile.runs_per_task > 1 and profile.task_time_budget_min is None


# ---- plan --------------------------------------------------------------------------------------
def test_plan_counts_tasks_and_charges_start_up_once_per_task() -> None:
    grid = paper_grid()
    unpacked = make_plan(grid, ClusterProfile(task_startup_s=90), model_costs())
    packed = make_plan(grid, ClusterProfile(task_startup_s=90, runs_per_task=2), model_costs())
    ((_, tasks_1),), ((_, tasks_2),) = unpacked.tasks, packed.tasks
    assert [len(t) for t in tasks_1] == [1, 1, 1, 1] and [len(t) for t in tasks_2] == [2, 2]
    assert unpacked.startup_hours == pytest.approx(4 * 90 / 3600)
    assert packed.startup_hours == pytest.approx(2 * 90 / 3600)
    training = sum(r.hours for r in packed.runs)
    assert packed.gpu_hours == pytest.approx(training + 2 * 90 / 3600 + packed.cache_hours)
    assert unpacked.gpu_hours - packed.gpu_hours == pytest.approx(2 * 90 / 3600)


def test_plan_prints_tasks_and_runs_per_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "packed.toml"
    profile.write_text("runs_per_task = 2\ntask_startup_s = 90\n")
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\n[defaults]\ndataset = "cub"\ndata_root = "/nowhere"\nmethod = "vmfproto"\n'
                    'backbone = "dinov2_vitb14"\n[[sweep]]\nprototypes_per_class = [3, 5]\nseed = [0, 1, 2]\n')
    assert main(["plan", str(grid), "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "≤ 2 run(s) per task" in out and "3 array task(s) at 90 s each" in out
    row = next(line for line in out.splitlines() if "GPU, " in line)
    assert [cell.strip() for cell in row.split("│")[2:5]] == ["6", "3", "2"]  # runs, tasks, runs per task


# ---- job records and states of packed runs ------------------------------------------------------
def packed_record(position: int) -> JobRecord:
    return JobRecord(executor="slurm", job_id="7_1", submitted="t", submitit_folder="/f", array_job_id="7",
                     array_task_id=1, task_position=position, task_runs=2)


def attempt(rd: RunDir, job_id: str = "7_1", restart_count: int = 0) -> None:
    atomic_write_json(rd.path / ATTEMPT_FILE, {"job_id": job_id, "restart_count": restart_count})


def test_status_tells_the_running_run_of_a_task_from_the_one_waiting(tmp_path: Path) -> None:
    first, second = RunDir(tmp_path / "a"), RunDir(tmp_path / "b")
    running = JobState("7_1", "RUNNING")
    attempt(first)
    assert merge_state(first, packed_record(0), running).label == "running"
    state = merge_state(second, packed_record(1), running)
    assert state.label == "waiting in task 7_1 (run 2 of 2)" and state.live and not state.failed
    assert merge_state(second, packed_record(1), JobState("7_1", "PENDING")).label == "pending"
    atomic_write_json(first.result_path, {"run_id": "a"})
    attempt(second)
    assert merge_state(first, packed_record(0), running).label == "done"
    assert merge_state(second, packed_record(1), running).label == "running"
    # requeued: the interrupted run's attempt is from the task's earlier attempt until it starts again
    requeued = JobState("7_1", "RUNNING", restarts=1)
    assert merge_state(second, packed_record(1), requeued).label == "waiting in task 7_1 (run 2 of 2), requeued 1×"
    attempt(second, restart_count=1)
    assert merge_state(second, packed_record(1), requeued).label == "running, requeued 1×"
    # a run that failed in this attempt while the task goes on with its next run
    atomic_write_json(second.failure_path, {"reason": "ValueError: x"})
    state = merge_state(second, packed_record(1), requeued)
    assert state.label == "failed" and state.failed and not state.live


# ---- packed tasks through submitit ----------------------------------------------------------------
def metrics(grid: GridSpec, runs_root: Path) -> dict[str, dict[str, float | None]]:
    return {spec.run_id: RunDir(grid.run_dir(runs_root, spec)).result()["metrics"] for spec in grid.runs}


@pytest.mark.slow
def test_packed_tasks_give_each_run_its_unpacked_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tiny_grid("tiny", tmp_path / "data", seeds=(0, 1), js=(2, 3))
    packed_root, unpacked_root = tmp_path / "packed", tmp_path / "unpacked"
    submission = submit_runs(grid, list(grid.runs), packed_root, tmp_path / "cache", executor="submitit-local",
                             profile=ClusterProfile(runs_per_task=2))
    (array,) = submission.arrays
    assert [len(task) for task in array.tasks] == [2, 2] and len(array.jobs) == 2
    assert [o.state for o in wait_for(submission)] == ["done"] * 4

    for task, job in zip(array.tasks, array.jobs):
        for position, spec in enumerate(task):
            rd = RunDir(grid.run_dir(packed_root, spec))
            (record,) = job_records(rd.path)
            assert (record.job_id, record.task_position, record.task_runs) == (job.job_id, position, 2)
            started = json.loads((rd.path / ATTEMPT_FILE).read_text())
            assert (started["job_id"], started["task_position"], started["task_runs"]) == (job.job_id, position, 2)
    assert main(["status", str(packed_root / grid.name)]) == 0
    assert "4 runs: 4 done" in capsys.readouterr().out

    reference = submit_runs(grid, list(grid.runs), unpacked_root, tmp_path / "cache", executor="debug",
                            profile=ClusterProfile())
    assert [len(task) for task in reference.arrays[0].tasks] == [1, 1, 1, 1]
    assert [o.state for o in wait_for(reference)] == ["done"] * 4
    packed, unpacked = metrics(grid, packed_root), metrics(grid, unpacked_root)
    assert packed.keys() == unpacked.keys()
    for run_id in packed:  # another process: equal within METRIC_RTOL (support.py: its reason)
        assert_same_metrics(packed[run_id], unpacked[run_id])


@pytest.mark.slow
def test_interrupted_packed_task_skips_its_finished_run_and_resumes_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = tiny_grid("resume", tmp_path / "data", epochs=2, js=(2, 3))
    runs_root, cache_root = tmp_path / "runs", tmp_path / "cache"
    ((_, specs),) = group_by_shape(list(grid.runs), ClusterProfile())
    first, second = (RunDir(grid.run_dir(runs_root, spec)) for spec in specs)
    job = RunJob(tuple(TaskRun(spec, grid.run_dir(runs_root, spec)) for spec in specs), cache_root, None)
    monkeypatch.setenv("SUBMITIT_DEBUG_JOB_ID", "77")  # submitit's job environment of the calls below

    real_train = benchmark.run.runner.train

    def preempted_in_the_second_run(*args: object, **kwargs: object) -> object:
        if kwargs["checkpoint_path"] == second.checkpoint_path:
            kwargs["stop_after_epoch"] = 1  # checkpoint epoch 1, then stop, as a requeue signal does
        return real_train(*args, **kwargs)

    monkeypatch.setattr(benchmark.run.runner, "train", preempted_in_the_second_run)
    with pytest.raises(TrainingInterrupted):
        job()
    assert first.is_complete and not second.is_complete and not second.failure_path.exists()
    first_log, first_result = first.log_path.read_text(), first.result_path.read_bytes()
    monkeypatch.setattr(benchmark.run.runner, "train", real_train)

    requeued = pickle.loads(pickle.dumps(job.checkpoint().function))  # what submitit resubmits
    answer = requeued()
    assert answer == {spec.run_id: {"state": "done"} for spec in specs}
    assert first.log_path.read_text() == first_log and first.result_path.read_bytes() == first_result  # not retrained
    assert "resuming at" in second.log_path.read_text()
    assert second.result()["timing"]["resumed_from_epoch"] == 1

    reference = tmp_path / "reference"
    benchmark.run.runner.execute_run(specs[1], grid.run_dir(reference, specs[1]), cache_root=cache_root, progress=False)
    assert second.result()["metrics"] == RunDir(grid.run_dir(reference, specs[1])).result()["metrics"]


def test_a_task_needs_a_run() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        RunJob((), Path("."), None)


def test_each_run_of_a_failed_task_reads_its_own_outcome(tmp_path: Path) -> None:
    from slurm.executors import _outcome

    spec = tiny_grid("g", tmp_path).runs[0]
    done, failed, unreached = (RunDir(tmp_path / name) for name in ("done", "failed", "unreached"))
    atomic_write_json(done.result_path, {"run_id": spec.run_id})
    atomic_write_json(failed.failure_path, {"reason": "ValueError: bad"})
    task_error = "ValueError: bad"  # the task ends with its first failure's error
    assert _outcome(spec, {}, done, task_error).state == "done"
    assert (_outcome(spec, {}, failed, task_error).state, _outcome(spec, {}, failed, "").detail) == \
        ("failed", "ValueError: bad")
    assert _outcome(spec, {}, unreached, "KilledByTest").detail == "KilledByTest"
    busy = _outcome(spec, {"state": "running_elsewhere", "holder": "pid 1"}, unreached, "")
    assert (busy.state, busy.detail) == ("running-elsewhere", "pid 1")
