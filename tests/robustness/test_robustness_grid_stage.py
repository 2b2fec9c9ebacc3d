"""``protobench robustness GRID``: the stage on every finished run of a grid with the grid's
``[robustness]`` settings, here or as submitit jobs; which runs are settled (scored, untrained, queued,
failed before) and which are to do; a failed run recorded while the next goes on; a requeued task
skipping the runs it scored; the stage's state in ``status``. (On a real SLURM cluster:
tests/slurm/test_cluster.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.cluster import ClusterProfile
from benchmark.grid import load_grid
from benchmark.robustness import grid_stage
from benchmark.robustness.grid_stage import pending_stage, scored_with, stage_label
from benchmark.robustness.options import RobustnessOptions
from benchmark.run.runner import execute_run
from benchmark.run.states import JobRecord, add_job_record, job_records
from benchmark.run.store import STAGE_FAILURE_FILE, STAGE_JOB_FILE
from slurm.executors import submit_stage, wait_for_stage
from slurm.jobs import RobustnessJob
from slurm.scheduler import JobState
from tiny_grid import write_tiny_grid

STAGE = {"families": ["misalignment"], "steps": 2, "images": 4, "batch_size": 2}
OPTIONS = RobustnessOptions(("misalignment",), steps=2, images=4, batch_size=2)


def _grid_file(root: Path, **stage: object) -> Path:
    path = write_tiny_grid(root / "g.toml", "g", root / "data", device="cpu", image_size=28,
                           sweep=[{"method": ["vmfproto"], "method_args": {"end_to_end_epochs": 1}},
                                  {"method": ["linear_probe"]}])
    table = {**STAGE, **stage}
    lines = ["[robustness]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    path.write_text(path.read_text() + "\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A grid file whose two runs (vMFProto, the linear probe) are trained; the stage not run."""
    root = tmp_path_factory.mktemp("grid-stage")
    path = _grid_file(root)
    grid = load_grid(str(path))
    for spec in grid.runs:
        execute_run(spec, grid.run_dir(root / "runs", spec), cache_root=root / "runs" / ".token-cache", progress=False)
    return path


def _copy(trained: Path, tmp_path: Path) -> Path:
    """The trained grid's runs copied to ``tmp_path`` (each test changes its own)."""
    import shutil

    shutil.copytree(trained.parent / "runs", tmp_path / "runs", ignore=shutil.ignore_patterns(".token-cache"))
    shutil.copy(trained, tmp_path / "g.toml")
    return tmp_path / "g.toml"


def _run_dirs(path: Path) -> list[Path]:
    grid = load_grid(str(path))
    return [grid.run_dir(path.parent / "runs", spec) for spec in grid.runs]


def test_the_grid_stage_scores_every_finished_run_with_the_grids_settings_then_settles_them(
        trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(trained, tmp_path)
    runs_dir = str(tmp_path / "runs")
    assert main(["robustness", str(path), "--runs-dir", runs_dir]) == 0
    assert "2 done" in capsys.readouterr().out
    for run_dir in _run_dirs(path):
        result = json.loads((run_dir / "result.json").read_text())
        assert scored_with(result, OPTIONS) and result["robustness"]["num_images"] == 4
        assert result["robustness"]["families"]["misalignment"]["steps"] == 2  # the grid's table, not the default
    assert main(["robustness", str(path), "--runs-dir", runs_dir]) == 0
    assert "2 skipped" in capsys.readouterr().out
    # a setting given on the command line overrides the grid's table: the runs are scored again
    assert main(["robustness", str(path), "--runs-dir", runs_dir, "--robustness-images", "2"]) == 0
    assert "2 done" in capsys.readouterr().out
    assert main(["status", runs_dir]) == 0
    assert "misalignment (2 images)" in capsys.readouterr().out


def test_an_untrained_run_is_settled_and_a_setting_out_of_range_is_refused_before_compute(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(trained, tmp_path)
    first, second = _run_dirs(path)
    (second / "result.json").unlink()
    monkeypatch.setattr(grid_stage, "execute_stage", lambda *a: pytest.fail("the stage ran"))
    assert main(["robustness", str(path), "--runs-dir", str(tmp_path / "runs"), "--robustness-images", "33"]) == 2
    assert "--robustness-images 33" in capsys.readouterr().err
    assert not (first / STAGE_FAILURE_FILE).exists() and "robustness" not in json.loads(
        (first / "result.json").read_text())
    todo, settled = pending_stage(load_grid(str(path)), list(load_grid(str(path)).runs), tmp_path / "runs", OPTIONS)
    assert [spec.method for spec in todo] == ["vmfproto"]
    assert [(o.spec.method, o.state) for o in settled] == [("linear_probe", "untrained")]


def test_a_grid_without_a_robustness_table_needs_the_families(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_tiny_grid(tmp_path / "plain.toml", "plain", tmp_path / "data")
    assert main(["robustness", str(path), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "has no [robustness] table; give the families (--families" in capsys.readouterr().err


def test_a_failed_run_is_recorded_the_next_goes_on_and_it_waits_for_retry_failed(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(trained, tmp_path)
    first, second = _run_dirs(path)
    from benchmark.robustness import stage

    original = stage.run_robustness

    def failing_first(run_dir: Path, options: RobustnessOptions) -> dict:
        if Path(run_dir) == first:
            raise FloatingPointError("NaN activations")
        return original(run_dir, options)

    monkeypatch.setattr(stage, "run_robustness", failing_first)
    runs_dir = str(tmp_path / "runs")
    assert main(["robustness", str(path), "--runs-dir", runs_dir]) == 1
    out = capsys.readouterr().out
    assert "failed:" in out and "NaN activations" in out and "1 done" in out
    failure = json.loads((first / STAGE_FAILURE_FILE).read_text())
    assert failure["reason"] == "FloatingPointError: NaN activations" and "Traceback" in failure["traceback"]
    assert scored_with(json.loads((second / "result.json").read_text()), OPTIONS)
    assert stage_label(first, {}) == "failed: FloatingPointError: NaN activations"
    assert main(["robustness", str(path), "--runs-dir", runs_dir]) == 1  # not tried again without the flag
    assert "skipped-failed" in capsys.readouterr().out
    monkeypatch.setattr(stage, "run_robustness", original)
    assert main(["robustness", str(path), "--runs-dir", runs_dir, "--retry-failed"]) == 0
    assert not (first / STAGE_FAILURE_FILE).exists()
    assert scored_with(json.loads((first / "result.json").read_text()), OPTIONS)


@pytest.mark.parametrize("slurm_state, expected", [
    ("RUNNING", "queued"), ("PENDING", "queued"), ("TIMEOUT", "skipped-failed"), ("OUT_OF_MEMORY", "skipped-failed"),
    ("COMPLETED", "todo"),  # a job that completed without scoring these settings ran others
    (None, "todo"),  # SLURM forgot the job: submitted again (the stage resumes from its finished batches)
])
def test_a_runs_stage_job_settles_it_as_slurm_answers(trained: Path, tmp_path: Path, slurm_state: str | None,
                                                      expected: str) -> None:
    path = _copy(trained, tmp_path)
    grid = load_grid(str(path))
    first = _run_dirs(path)[0]
    add_job_record(first, JobRecord(executor="slurm", job_id="41_0", submitted="t", submitit_folder="/f",
                                    array_job_id="41", array_task_id=0), STAGE_JOB_FILE)
    assert job_records(first) == []  # training's job.json is untouched

    def ask(ids: list[str]) -> dict[str, JobState]:
        assert ids == ["41_0"]
        return {} if slurm_state is None else {"41_0": JobState("41_0", slurm_state)}

    todo, settled = pending_stage(grid, list(grid.runs)[:1], tmp_path / "runs", OPTIONS, ask=ask)
    assert (settled[0].state if settled else "todo") == expected
    if expected == "skipped-failed":
        assert f"ended {slurm_state}" in settled[0].detail
        todo, settled = pending_stage(grid, list(grid.runs)[:1], tmp_path / "runs", OPTIONS, ask=ask,
                                      retry_failed=True)
        assert len(todo) == 1


def test_submitted_tasks_score_the_runs_and_a_requeued_task_skips_those_it_scored(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _copy(trained, tmp_path)
    grid = load_grid(str(path))
    submission = submit_stage(grid, list(grid.runs), tmp_path / "runs", OPTIONS, executor="debug",
                              profile=ClusterProfile(runs_per_task=2))
    assert [o.state for o in wait_for_stage(submission, OPTIONS)] == ["done", "done"]
    for run_dir in _run_dirs(path):
        (record,) = job_records(run_dir, STAGE_JOB_FILE)
        assert record.executor == "debug" and record.submitit_folder == str(submission.folder)
    again = submit_stage(grid, list(grid.runs), tmp_path / "runs", OPTIONS, executor="debug", profile=ClusterProfile())
    assert again.arrays == [] and {o.state for o in again.settled} == {"skipped"}
    # the callable submitit requeues after a time limit: runs already scored are not scored again
    ran: list[Path] = []
    monkeypatch.setattr(grid_stage, "execute_stage", lambda run_dir, options: ran.append(run_dir))
    job = RobustnessJob(tuple(_run_dirs(path)), OPTIONS, None)
    assert job() == {str(d): {"state": "done"} for d in _run_dirs(path)} and ran == []
    other = RobustnessOptions(("misalignment",), steps=3, images=4, batch_size=2)
    RobustnessJob(tuple(_run_dirs(path)), other, None)()
    assert ran == _run_dirs(path)


def test_cancel_cancels_a_live_stage_job_and_a_plain_robustness_command_submits_it_again(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(trained, tmp_path)
    grid = load_grid(str(path))
    first = _run_dirs(path)[0]
    add_job_record(first, JobRecord(executor="slurm", job_id="41_0", submitted="t", submitit_folder="/f",
                                    array_job_id="41", array_task_id=0), STAGE_JOB_FILE)
    scheduler = {"41_0": JobState("41_0", "RUNNING")}
    cancelled: list[list[str]] = []

    def scancel(ids: list[str]) -> None:
        cancelled.append(ids)
        scheduler.update({i: JobState(i, "CANCELLED") for i in ids})

    monkeypatch.setattr("benchmark.cli.runs.query_jobs", lambda ids: {i: scheduler[i] for i in ids if i in scheduler})
    monkeypatch.setattr("benchmark.cli.runs.cancel_jobs", scancel)
    assert main(["cancel", str(tmp_path / "runs" / "g")]) == 0
    assert cancelled == [["41_0"]]
    assert "cancelled 1 robustness-stage job(s) of 1 run(s): 41_0; `protobench robustness`" in capsys.readouterr().out

    def ask(ids: list[str]) -> dict[str, JobState]:
        return {i: scheduler[i] for i in ids if i in scheduler}

    todo, settled = pending_stage(grid, list(grid.runs)[:1], tmp_path / "runs", OPTIONS, ask=ask)
    assert len(todo) == 1 and not settled  # cancelled by the user: not a failure
    (first / "robustness.cancelled.json").unlink()  # cancelled by someone else (scancel): a failure
    todo, settled = pending_stage(grid, list(grid.runs)[:1], tmp_path / "runs", OPTIONS, ask=ask)
    assert [o.state for o in settled] == ["skipped-failed"] and "ended CANCELLED" in settled[0].detail
