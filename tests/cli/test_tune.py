"""``protobench tune`` end to end: N complete trials per cell, the defaults first, the test split
never opened, a second call a no-op, then ``run --hyperparameters tuned`` and ``report --tuning``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tuning_grid import record_opened_splits, write_tuning_grid

import benchmark.run.runner as runner
from benchmark.cli import main

pytestmark = pytest.mark.slow


def _summaries(runs: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["cell"]["method"]: json.loads(p.read_text())
            for p in sorted((runs / "tun.tuning").glob("*/summary.json"))}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Tune the grid (3 trials per cell) while recording every split a trial opens."""
    root = tmp_path_factory.mktemp("tune")
    grid = write_tuning_grid(root / "grid.toml", root / "data")
    patch = pytest.MonkeyPatch()
    opened = record_opened_splits(patch)
    try:
        assert main(["tune", str(grid), "--trials", "3", "--runs-dir", str(root / "runs")]) == 0
    finally:
        patch.undo()
    return root, grid, opened


def test_every_cell_has_exactly_n_complete_trials_with_the_defaults_first(tuned):
    root, _, _ = tuned
    summaries = _summaries(root / "runs")
    assert sorted(summaries) == ["protopnet", "vmfproto"]
    for method, summary in summaries.items():
        assert summary["complete"] == 3 == summary["budget"]["trials"]
        numbers = [t["number"] for t in summary["trials"]]
        assert len(numbers) == len(set(numbers))
        assert summary["trials"][0]["params"] == summary["default"]["params"]
        assert summary["budget"]["epochs_per_trial"] == 2
    assert summaries["vmfproto"]["space"]["tau"] == {"kind": "uniform", "low": 0.2, "high": 0.8}
    assert summaries["vmfproto"]["default"]["params"]["tau"] == 0.5
    split = json.loads(next((root / "runs" / "tun.tuning").glob("vmfproto*/validation_split.json")).read_text())
    assert split["validation_images"] == 4 and split["fraction"] == 0.1  # one of the 4 training images per class


def test_no_trial_opens_the_test_split(tuned):
    _, _, opened = tuned
    assert "cache:train" in opened and "load_split:train" in opened
    assert not [event for event in opened if event.endswith(":test")], opened
    # packed: each cell's first trial opens its training entry, the next trials reuse it (2 cells × 3 trials)
    assert opened.count("cache:train") == 2, opened


def test_tuning_again_is_a_no_op(tuned, monkeypatch, capsys):
    root, grid, _ = tuned
    journals = {p: p.read_bytes() for p in (root / "runs" / "tun.tuning").glob("*/journal.log")}

    def no_training(*args, **kwargs):
        raise AssertionError("a complete study trained again")

    monkeypatch.setattr(runner, "execute_run", no_training)
    assert main(["tune", str(grid), "--trials", "3", "--runs-dir", str(root / "runs")]) == 0
    assert {p: p.read_bytes() for p in journals} == journals
    assert "3/3 complete" in capsys.readouterr().out


def test_tuned_runs_and_the_tuning_report(tuned, capsys):
    root, grid, _ = tuned
    runs = root / "runs"
    assert main(["run", str(grid), "--runs-dir", str(runs)]) == 0
    assert main(["run", str(grid), "--runs-dir", str(runs), "--hyperparameters", "tuned"]) == 0
    results = [json.loads(p.read_text()) for p in (runs / "tun").glob("*/result.json")]
    tuned_results = [r for r in results if r["spec"]["variant"] == "tuned"]
    assert len(results) == 8 and len(tuned_results) == 4
    best = _summaries(runs)["protopnet"]["best"]
    record = next(r for r in tuned_results if r["spec"]["method"] == "protopnet")["tuning"]
    assert record["trial"] == best["number"] and record["trials"] == 3 and record["hyperparameters"] == best["params"]
    assert record["space_fingerprint"] == _summaries(runs)["protopnet"]["space_fingerprint"]
    capsys.readouterr()
    assert main(["report", str(runs)]) == 0  # the trials beside the grid's runs are left out
    assert "tuned" in capsys.readouterr().out
    assert main(["report", str(runs / "tun"), "--tuning"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| vMFProto") or line.startswith("| ProtoPNet")]
    assert len(rows) == 2 and all("| 3/3 " in row and "| 2 " in row for row in rows)
    assert "paired on seed" in out and "the same for every method" in out
    p_values = [row.split("|")[14].strip() for row in rows]
    assert all(p != "–" for p in p_values)
    assert main(["plot", str(runs / "tun"), "--tuning", "--out", str(root / "tuning.png")]) == 0
    from PIL import Image

    with Image.open(root / "tuning.png") as image:  # two studies: history and importances each, stacked
        assert image.format == "PNG" and image.height > 2 * image.width


def test_a_trials_validation_scores_are_marked_in_status(tuned, capsys):
    root, _, _ = tuned
    capsys.readouterr()
    assert main(["status", str(root / "runs" / "tun.tuning"), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "(val)" in out and "(val): scored on the validation split (a tuning trial)" in out


def test_a_crashing_trial_is_recorded_and_the_study_goes_on(tmp_path, capsys, monkeypatch):
    """A method that fails on part of its space: the failure is recorded in summary.json (written
    after every trial), another point is asked, and the cell still ends with N finished trials."""
    import benchmark.tuning.trials as trials

    real = trials.run_trial

    def crash_on_trial_1(trial, cell, settings, loaded=None):
        if trial.number == 1:
            raise RuntimeError("NaN loss at this point of the space")
        return real(trial, cell, settings, loaded)

    monkeypatch.setattr(trials, "run_trial", crash_on_trial_1)
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    runs = tmp_path / "runs"
    assert main(["tune", str(grid), "--trials", "2", "--only", "method=vmfproto", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "up to 7 failures per cell" in out and "failed (1 of the 7 failures allowed)" in out
    summary = _summaries(runs)["vmfproto"]
    assert summary["counts"]["FAIL"] == 1 and summary["complete"] == 2
    assert main(["report", str(runs), "--tuning"]) == 0
    assert "| 2/2, 1 failed " in capsys.readouterr().out


def test_a_second_tune_draws_new_points_from_the_studys_history(tmp_path, capsys):
    """`tune --trials 2`, then `--trials 4` in a new call: the sampler is seeded from the study and
    its trial count, so the second call does not propose the first call's points again."""
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    runs = tmp_path / "runs"
    for n in ("2", "4"):
        assert main(["tune", str(grid), "--trials", n, "--only", "method=vmfproto", "--runs-dir", str(runs)]) == 0
    points = [tuple(sorted(t["params"].items())) for t in _summaries(runs)["vmfproto"]["trials"]]
    assert len(points) == 4 and len(set(points)) == 4, points


def test_tuned_before_tuning_is_refused_naming_the_command(tmp_path, capsys):
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs"), "--hyperparameters", "tuned"]) == 2
    assert "protobench tune" in capsys.readouterr().err


@pytest.mark.parametrize("tuning, message", [
    ("trails = 3\n", "trails"),
    ("[tuning.space.protopnet]\nadd_on_lr = { kind = \"log_uniform\", low = 0.01, high = 0.1 }\n",
     "the cell's value add_on_lr = 0.003 lies outside its search space log_uniform[0.01, 0.1]"),
    ("[tuning.space.tesnet]\nbasis_lr = { kind = \"log_uniform\", low = 0.01, high = 0.1 }\n", "'tesnet'"),
    # a choice given as a table, and a choice the method refuses: before the first trial, not trial by trial
    ("gating = { kind = \"categorical\", choices = [\"attention_pca\", { a = 1 }] }\n",
     "categorical choices must be strings, numbers or booleans, not a dict"),
    ("gating = { kind = \"categorical\", choices = [\"attention_pca\", \"bogus\"] }\n",
     "gating = categorical('attention_pca', 'bogus') holds 'bogus', which the method refuses"),
    ("gamma = { kind = \"uniform\", low = 0.9, high = 1.5 }\n",
     "gamma = uniform[0.9, 1.5] holds 1.5, which the method refuses"),
])
def test_bad_tuning_tables_are_refused_before_any_trial(tmp_path, capsys, tuning, message):
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data", tuning)
    assert main(["tune", str(grid), "--trials", "2", "--runs-dir", str(tmp_path / "runs")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
