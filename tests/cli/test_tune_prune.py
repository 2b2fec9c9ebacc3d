"""``protobench tune --prune``: a trial reports its validation accuracy after each epoch and stops
when the study's pruner says so; pruned trials count towards N, the defaults are never pruned, a
pruned trial's run directory is no finished run, the test split stays closed, and pruning with
several objectives (or on a study tuned without it) is refused before any compute."""
from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from tuning_grid import record_opened_splits, write_tuning_grid

import benchmark.tuning.study as study_module
from benchmark.cli import main
from benchmark.grid import load_grid
from benchmark.run.epoch_score import Pruned
from benchmark.run.store import RunDir
from benchmark.tuning.config import tuning_cells, tuning_config
from benchmark.tuning.study import open_study, study_dir
from benchmark.tuning.trials import pruning_hook
from benchmark.tuning.workers import tuning_root

pytestmark = pytest.mark.slow
PRUNE_ALL = 101.0  # a validation accuracy (in %) is always below it: every trial asked is pruned at its first check


def _summary(runs: Path) -> dict:
    (path,) = (runs / "tun.tuning").glob("vmfproto*/summary.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """Tune vMFProto (2 epochs per trial) with `prune = true` in the grid and a pruner that prunes
    whatever it is asked, recording every split a trial opens."""
    root = tmp_path_factory.mktemp("prune")
    grid = write_tuning_grid(root / "grid.toml", root / "data", keys="prune = true\n")
    patch = pytest.MonkeyPatch()
    opened = record_opened_splits(patch)
    patch.setattr(study_module, "pruner", lambda prune: optuna.pruners.ThresholdPruner(lower=PRUNE_ALL)
                  if prune else optuna.pruners.NopPruner())
    try:
        code = main(["tune", str(grid), "--trials", "3", "--only", "method=vmfproto", "--runs-dir", str(root / "runs")])
    finally:
        patch.undo()
    assert code == 0
    return root, grid, opened


def test_pruned_trials_stop_before_their_last_epoch_and_count_towards_n(pruned):
    root, _, _ = pruned
    summary = _summary(root / "runs")
    assert summary["budget"]["trials"] == 3 and summary["budget"]["epochs_per_trial"] == 2
    assert (summary["complete"], summary["pruning"]["pruned"], summary["finished"]) == (1, 2, 3)
    assert summary["pruning"]["on"] and summary["pruning"]["pruner"].startswith("ThresholdPruner(")
    assert summary["pruning"]["epochs_trained"] == 2 + 1 + 1
    default, *others = summary["trials"]
    assert default["state"] == "COMPLETE" and default["params"] == summary["default"]["params"]
    # the head-only score after the last epoch is the trial's validation accuracy, as evaluated
    assert sorted(default["validation_acc_per_epoch"]) == ["1", "2"]
    assert default["validation_acc_per_epoch"]["2"] == pytest.approx(default["values"][0])
    assert [t["state"] for t in others] == ["PRUNED", "PRUNED"]
    for trial in others:
        assert list(trial["validation_acc_per_epoch"]) == ["1"]  # stopped after epoch 1 of 2
        rd = RunDir(root / "runs" / "tun.tuning" / "trials" / trial["run_id"])
        assert rd.state == "pruned" and json.loads(rd.pruned_path.read_text())["epoch"] == 1
        assert not rd.result_path.exists() and not rd.checkpoint_path.exists() and not rd.failure_path.exists()
        assert len(rd.metrics_path.read_text().splitlines()) == 1


def test_no_pruned_trial_opens_the_test_split(pruned):
    _, _, opened = pruned
    assert "cache:train" in opened
    assert not [event for event in opened if event.endswith(":test")], opened


def test_every_output_states_the_pruning(pruned, capsys):
    root, grid, _ = pruned
    runs = root / "runs"
    assert main(["tune", str(grid), "--trials", "3", "--only", "method=vmfproto", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "pruning on (MedianPruner(" in out and "1/3 complete, 2 pruned (pruning on: 4 of 6 epochs" in out
    assert main(["status", str(runs / "tun.tuning"), "--json"]) == 0
    states = sorted(record["state"] for record in json.loads(capsys.readouterr().out))
    assert states == ["done", "pruned", "pruned"]
    assert main(["report", str(runs / "tun.tuning"), "--tuning"]) == 0
    out = capsys.readouterr().out
    assert "| 1/3 +2 pruned " in out and "Pruning on in 1 of 1 cells (ThresholdPruner(" in out
    assert "2 trial(s) stopped early" in out


def test_tuning_a_pruned_study_without_pruning_is_refused(pruned, capsys):
    root, grid, _ = pruned
    assert main(["tune", str(grid), "--trials", "3", "--only", "method=vmfproto", "--no-prune",
                 "--runs-dir", str(root / "runs")]) == 2
    err = capsys.readouterr().err
    assert "was created with pruning on, and this tune has it off" in err and "--prune" in err


def test_pruning_a_study_tuned_without_it_is_refused_before_any_trial(tmp_path, capsys):
    grid_path = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    grid = load_grid(str(grid_path))
    (cell, *_) = tuning_cells(grid, list(grid.runs), tuning_config(grid, trials=2))
    root = tuning_root(tmp_path / "runs", grid.name)
    open_study(study_dir(root, cell), cell)  # created without pruning
    assert main(["tune", str(grid_path), "--trials", "2", "--prune", "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "was created with pruning off, and this tune has it on" in capsys.readouterr().err
    assert not (root / "trials").exists()


@pytest.mark.parametrize("keys, args, message", [
    ('objectives = ["acc", "con"]\n', ["--prune", "--sampler", "nsga2"],
     "cannot be used with several objectives (acc, con): Optuna prunes single-objective studies only"),
    ('objectives = ["acc", "con"]\nprune = true\n', [],
     "cannot be used with several objectives (acc, con): Optuna prunes single-objective studies only"),
    ('objectives = ["con"]\n', ["--prune"],
     "judges a trial by its validation accuracy after each epoch, but the objective is 'con'"),
    ("prune = 1\n", [], "prune = 1 must be true or false"),
])
def test_pruning_that_cannot_hold_is_refused_before_any_compute(tmp_path, capsys, keys, args, message):
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data", keys=keys)
    assert main(["tune", str(grid), "--trials", "2", *args, "--runs-dir", str(tmp_path / "runs")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _study_with_complete_trials(count: int, accuracy: float) -> optuna.Study:
    """A study with the suite's pruner and ``count`` complete trials at ``accuracy`` after every epoch."""
    study = optuna.create_study(direction="maximize", pruner=study_module.pruner(True))
    for _ in range(count):
        study.add_trial(optuna.trial.create_trial(value=accuracy, intermediate_values={1: accuracy, 2: accuracy},
                                                  params={}, distributions={}))
    return study


def test_the_median_pruner_stops_a_trial_below_the_complete_trials_median(tmp_path):
    grid = load_grid(str(write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data", keys="prune = true\n")))
    cell = next(c for c in tuning_cells(grid, list(grid.runs), tuning_config(grid, trials=9))
                if c.base.method == "vmfproto")
    assert cell.epoch_budget == 2
    study = _study_with_complete_trials(5, 90.0)
    study.enqueue_trial({}, user_attrs={"defaults": True})
    defaults = study.ask()
    pruning_hook(defaults, cell)(1, 10.0)  # the defaults are never pruned
    below, above, last = study.ask(), study.ask(), study.ask()
    with pytest.raises(Pruned, match="pruned after epoch 1 at validation accuracy 10.00"):
        pruning_hook(below, cell)(1, 10.0)
    pruning_hook(above, cell)(1, 95.0)
    pruning_hook(last, cell)(2, 10.0)  # the last epoch: the trial is complete, whatever the pruner says
    assert last.should_prune()
    early = _study_with_complete_trials(4, 90.0)  # fewer complete trials than n_startup_trials = 5
    pruning_hook(early.ask(), cell)(1, 10.0)
