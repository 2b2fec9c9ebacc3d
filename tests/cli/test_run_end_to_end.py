"""End to end through the CLI on generated synthbirds with a tiny random trunk: results written,
re-runs skipped, interrupted runs resumed, re-evaluation exact, errors before compute."""
import json
from pathlib import Path

import pandas as pd
import pytest

from benchmark.cli import main
from benchmark.grid import load_grid
from benchmark.run.records import read_records
from benchmark.run.runner import execute_run
from benchmark.run.store import RunDir, find_run_dirs
from benchmark.run.training import TrainingInterrupted
from tiny_grid import write_tiny_grid


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def grid_file(workdir):
    path = workdir / "tiny.toml"
    write_tiny_grid(path, "tiny", workdir / "synthbirds", method_args={"end_to_end_epochs": 2},
                    sweep=[{"prototypes_per_class": [2], "seed": [0]}])
    return path


@pytest.fixture(scope="module")
def finished(workdir, grid_file):
    rc = main(["run", str(grid_file), "--runs-dir", str(workdir / "runs")])
    assert rc == 0
    runs = find_run_dirs(workdir / "runs")
    assert len(runs) == 1
    return runs[0]


def test_run_writes_result_with_all_metrics_and_provenance(finished):
    result = finished.result()
    assert set(result["metrics"]) >= {"acc", "con", "sta", "dis", "comp", "purity", "loc", "size_local", "size_global",
                                      "del"}
    assert all(v is not None for v in result["metrics"].values())
    assert result["evaluation"]["map_grid"] == [16, 16]
    assert result["evaluation"]["num_images"] > 0
    prov = result["provenance"]
    assert prov["weights_checksum"] and prov["dataset_fingerprint"]["test"] and prov["packages"]["torch"]
    assert set(result["timing"]["stage_seconds"]) == {"discovery", "end_to_end"}
    diagnostics = result["diagnostics"]
    assert set(diagnostics) == {"gating_fallback_images", "foreground_fraction", "ot_marginal_error", "kappa",
                                "warnings", "expected_warnings"}
    assert set(diagnostics["gating_fallback_images"]) == {"train", "test"}
    assert diagnostics["ot_marginal_error"]["epoch"] == 2 and diagnostics["ot_marginal_error"]["problems"] > 0
    for name in ("spec.json", "checkpoint.pt", "result.json", "log.txt"):
        assert (finished.path / name).exists()


def test_a_run_killed_before_its_first_checkpoint_reads_started_not_new(tmp_path):
    run = RunDir(tmp_path / "0123456789ab")
    run.path.mkdir()
    assert run.state == "new"
    run.log_path.write_text("loading trunk\n")  # training opened its log, then the process died
    assert run.state == "started"


def test_a_grid_prints_one_overall_progress_line_per_run_and_plan_previews_what_run_would_do(workdir, grid_file, capsys):
    grid = workdir / "two.toml"
    write_tiny_grid(grid, "two", workdir / "synthbirds", method_args={"end_to_end_epochs": 1},
                    sweep=[{"prototypes_per_class": [2], "seed": [0, 1]}])
    runs = workdir / "progress"
    assert main(["plan", str(grid), "--runs-dir", str(runs)]) == 0
    assert f"run would now: 0 done, 2 to train of 2 run(s) in {runs}; 0 of " in capsys.readouterr().out
    assert not runs.exists()  # the preview touches nothing
    assert main(["run", str(grid), "--runs-dir", str(runs)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "runs settled" in line]
    assert [line.split(":")[1].split(",")[0].strip() for line in lines] == ["1/2 runs settled", "2/2 runs settled"]
    assert lines[0].endswith("left (the 1 run(s) timed here, scaled to the 1 left by the cost model's relative "
                             "run costs)"), lines[0]
    assert lines[1].endswith(" elapsed")  # nothing left
    assert main(["plan", str(grid), "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert f"run would now: 2 done, 0 to train of 2 run(s) in {runs}" in out
    needs = int(out.split("token-cache entries already built")[0].split(" of ")[-1])
    assert f"{needs} of {needs} token-cache entries already built in {runs / '.token-cache'}" in out


def test_rerun_skips_finished_runs(workdir, grid_file, finished, capsys):
    before = finished.result_path.stat().st_mtime_ns
    assert main(["run", str(grid_file), "--runs-dir", str(workdir / "runs")]) == 0
    assert finished.result_path.stat().st_mtime_ns == before


def test_evaluate_reproduces_result_exactly(finished):
    assert main(["evaluate", str(finished.path)]) == 0
    again = json.loads((finished.path / "evaluations" / "map_pool1.json").read_text())
    assert again["metrics"] == finished.result()["metrics"]


def test_per_image_records_match_the_result_and_evaluate_writes_them_again(finished):
    result = finished.result()
    per_image = read_records(finished.path)
    assert len(per_image) == result["evaluation"]["num_images"] and per_image["index"].is_unique
    assert 100 * per_image["correct"].mean() == pytest.approx(result["metrics"]["acc"])
    assert per_image["dis"].mean() == pytest.approx(result["metrics"]["dis"])
    assert read_records(finished.path, "per_prototype")["con"].mean() == pytest.approx(
        result["metrics"]["con"])
    for path in finished.path.glob("per_*"):  # a run finished before records existed
        path.unlink()
    assert main(["evaluate", str(finished.path)]) == 0
    pd.testing.assert_frame_equal(read_records(finished.path), per_image)


def test_interrupted_run_resumes_at_last_finished_epoch(workdir, grid_file, finished):
    spec = load_grid(grid_file).runs[0].with_overrides(seed=5)
    run_dir = workdir / "resume" / spec.run_id
    with pytest.raises(TrainingInterrupted):
        execute_run(spec, run_dir, cache_root=workdir / "runs" / ".token-cache", progress=False,
                    stop_after_epoch=2, log=lambda line: None)
    assert RunDir(run_dir).state == "started"
    lines = []
    result = execute_run(spec, run_dir, cache_root=workdir / "runs" / ".token-cache", progress=False, log=lines.append)
    assert any("resuming at stage end_to_end, epoch 2" in line for line in lines)
    assert sum(line.startswith("epoch ") for line in lines) == 1
    assert result["timing"]["resumed_from_epoch"] == 2


def test_misspelt_key_fails_before_compute(workdir, grid_file, capsys):
    bad = workdir / "bad.toml"
    bad.write_text(grid_file.read_text().replace("batch_size = 8", "batchsize = 8"))
    assert main(["run", str(bad), "--runs-dir", str(workdir / "bad-runs")]) == 2
    err = capsys.readouterr().err
    assert "'batchsize'" in err and "did you mean 'batch_size'" in err
    assert not (workdir / "bad-runs").exists()


def test_missing_dataset_fails_before_compute(workdir, grid_file, capsys):
    text = grid_file.read_text().replace('dataset = "synthbirds"', 'dataset = "cub"').replace(
        "dataset_args = { classes = 4, images_per_class = 8, seed = 0 }", "")
    bad = workdir / "cub.toml"
    bad.write_text(text.replace(str(workdir / "synthbirds"), str(workdir / "no-cub")))
    assert main(["run", str(bad), "--runs-dir", str(workdir / "cub-runs")]) == 2
    assert "no-cub" in capsys.readouterr().err
    assert not list(Path(workdir / "cub-runs").rglob("result.json"))


def test_figures_are_written_and_non_empty(finished, workdir):
    out = workdir / "figures"
    assert main(["figures", str(finished.path), "--images", "2", "--out", str(out)]) == 0
    files = sorted(out.iterdir())
    assert [f.suffix for f in files] == [".pdf", ".png", ".pdf", ".png"]
    assert all(f.stat().st_size > 10_000 for f in files)


def test_explanations_pick_own_class_training_patches(finished):
    from benchmark.data import load_dataset
    from benchmark.run.explain import explain_run

    train_labels = load_dataset("synthbirds", finished.spec()["data_root"], "train").labels
    for exp in explain_run(finished.path, images=3):
        assert exp.gt_maps.shape == (2, 16, 16) and len(exp.top_gt) == 2
        for ev in exp.why:
            assert train_labels[ev.nearest_source[0]] == exp.predicted  # push rule: own class only
            assert ev.nearest_patch.ndim == 3 and ev.nearest_patch.size > 0


def test_perf_reports_side_by_side_ratios(workdir, grid_file, finished):
    out = workdir / "perf.json"
    assert main(["perf", str(grid_file), "--runs-dir", str(workdir / "runs"), "--warmup", "1",
                 "--timed-batches", "2", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["trunk_images_per_second"] > 0 and row["method_inference_images_per_second"] > 0
    assert [s["name"] for s in row["stages"]] == ["discovery", "end_to_end"]
    assert all(s["step_seconds"]["count"] == 2 for s in row["stages"])
    assert row["epoch_ratio_over_baseline"]["median"] == 1.0  # its own baseline
    assert row["epoch_speedup_from_cache"]["min"] <= row["epoch_speedup_from_cache"]["median"] \
        <= row["epoch_speedup_from_cache"]["max"]


def test_diagnostics_survive_a_resume_after_the_last_epoch(workdir, grid_file, finished):
    # interrupted after the final epoch: the resumed run trains nothing and reads the OT errors
    # of the last epoch from the checkpoint
    spec = load_grid(grid_file).runs[0].with_overrides(seed=6)
    run_dir = workdir / "resume-done" / spec.run_id
    with pytest.raises(TrainingInterrupted):
        execute_run(spec, run_dir, cache_root=workdir / "runs" / ".token-cache", progress=False,
                    stop_after_epoch=3, log=lambda line: None)
    lines = []
    result = execute_run(spec, run_dir, cache_root=workdir / "runs" / ".token-cache", progress=False, log=lines.append)
    assert not any(line.startswith("epoch ") for line in lines)
    error = result["diagnostics"]["ot_marginal_error"]
    assert error["epoch"] == 2 and error["problems"] > 0 and error["mean"] >= 0
