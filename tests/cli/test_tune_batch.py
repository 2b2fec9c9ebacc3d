"""``tune --batch K``: K trials asked at once and trained together, each an ordinary trial. A batched
trial equals the trial trained alone (bit for bit with the per-member step, validation accuracy
within 1e-5 and margins close with the vectorised one); a member that fails or is pruned leaves
the others training; every cell ends with exactly N finished trials; a method that does not
batch runs one by one and says so once; a bad --batch is refused before compute; ``perf --tuning``
writes its rows and ``plan --perf --tuning-trials`` charges them."""
from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pytest
from tiny_grid import write_tiny_grid
from tuning_grid import write_batched_grid, write_tuning_grid

import benchmark.estimates.perf as perf_module
import benchmark.run.lockstep as lockstep
import benchmark.tuning.study as study_module
import benchmark.tuning.workers as workers
from benchmark.cli import main
from benchmark.estimates.tuning_perf import trial_points
from benchmark.grid import load_grid, select_runs
from benchmark.run.prepare import Loaded
from benchmark.run.runner import execute_run
from benchmark.run.training import NonFiniteLossError
from benchmark.tuning.batched import run_batch
from benchmark.tuning.config import tuning_cells, tuning_config
from methods.protopnet import ProtoPNet
from methods.registry import BUILTIN_METHODS, declaration

pytestmark = pytest.mark.slow
ACCURACY_TOLERANCE = 1e-5  # percentage points (the bound on a batched trial's validation accuracy)
# per-image logit margins after training with the vectorised step: it reassociates sums, so they may
# differ as far as another summation order moves the trial alone, ten times over, and at least
# MARGIN_TOLERANCE. Measured (batched grid, cosine): 1e-6 for two trials; 1.1e-2 for the third
# (add-on lr 0.025), whose push picks another patch after a last-bit difference: 1.118e-2 under
# Reassociation alone, 1.117e-2 vectorised
MARGIN_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def tuning(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    return root, write_tuning_grid(root / "grid.toml", root / "data")


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    root = tmp_path_factory.mktemp("batched")
    return root, write_batched_grid(root / "grid.toml", root / "data")


def _specs(grid_path: Path, method: str, k: int):
    grid = load_grid(str(grid_path))
    runs = [r for r in select_runs(grid, [f"method={method}"]) if r.seed == 0]
    cell = tuning_cells(grid, runs, tuning_config(grid, trials=k))[0]
    return trial_points(cell, k)


def _margins(run_dir: Path) -> pd.Series:
    return pd.read_parquet(run_dir / "per_image.parquet")["margin"]


def _reassociation_noise(spec, root: Path, cache: Path) -> float:
    """How far the trial alone's margins move when each sum is rounded another way
    (benchmark/behaviour/tolerance.py): what the vectorised step's reassociation may move them by."""
    from benchmark.behaviour.tolerance import Reassociation

    with Reassociation(seed=0):
        execute_run(spec, root / "reassociated" / spec.run_id, cache_root=cache, progress=False)
    return float((_margins(root / "reassociated" / spec.run_id) - _margins(root / "alone" / spec.run_id)).abs().max())


@pytest.mark.parametrize("grid_name, method", [
    ("tuning", "protopnet"), ("tuning", "vmfproto"), ("batched", "protopnet")])  # the last: similarity = "cosine"
def test_a_batched_trial_equals_the_trial_trained_alone(request, monkeypatch, grid_name, method):
    """Every method that declares ``batches_trials`` (ProtoPNet with each similarity), with each
    step; the vectorised one really vectorised: ``vmap`` ran and never fell back to per-member steps."""
    root, grid = request.getfixturevalue(grid_name)
    specs = _specs(grid, method, 3)
    assert len({s.run_id for s in specs}) == 3
    vmapped = []
    real = lockstep.vectorised_terms
    monkeypatch.setattr(lockstep, "vectorised_terms", lambda *args: vmapped.append(1) or real(*args))
    cache = root / "cache"
    alone = [execute_run(s, root / method / "alone" / s.run_id, cache_root=cache, progress=False) for s in specs]
    noise = [_reassociation_noise(spec, root / method, cache) for spec in specs]
    for step in ("per-member", "vectorised"):
        dirs = [root / method / step / s.run_id for s in specs]
        vmapped.clear()
        together = run_batch(specs, dirs, cache_root=cache, loaded=Loaded(), hooks=[None] * 3, step=step)
        assert bool(vmapped) == (step == "vectorised"), f"{method}: the {step} step ran vmap {len(vmapped)} times"
        for spec, one, batched_trial, run_dir, own_noise in zip(specs, alone, together, dirs, noise):
            assert not isinstance(batched_trial, BaseException), batched_trial
            assert batched_trial["run_id"] == spec.run_id and batched_trial["evaluation_split"] == "validation"
            assert batched_trial["method_hyperparameters"] == one["method_hyperparameters"]
            log = (run_dir / "log.txt").read_text()
            assert "trained in a batch of trials" in log and "the vectorised step failed" not in log, log
            if step == "per-member":  # the same computation: every metric and margin bit for bit
                assert batched_trial["metrics"] == one["metrics"]
                assert _margins(run_dir).equals(_margins(root / method / "alone" / spec.run_id))
            else:
                assert abs(batched_trial["metrics"]["acc"] - one["metrics"]["acc"]) <= ACCURACY_TOLERANCE
                difference = (_margins(run_dir) - _margins(root / method / "alone" / spec.run_id)).abs().max()
                assert difference <= max(MARGIN_TOLERANCE, 10 * own_noise), (difference, own_noise)


def test_tune_help_names_the_methods_that_declare_batches(capsys):
    """The help's list is the declarations' (methods/specs), not a copy that goes stale."""
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    declared = [declaration(m).display_name for m in BUILTIN_METHODS if declaration(m).batches_trials]
    assert {"ProtoPNet", "vMFProto"} <= set(declared)
    assert f"the suite's methods that declare it: {', '.join(declared)};" in text


def test_a_member_that_fails_leaves_the_others_training(tuning, monkeypatch):
    """A trial whose loss turns non-finite fails (failure.json), the others finish as alone."""
    root, grid = tuning
    specs = _specs(grid, "protopnet", 3)
    doomed = specs[1].method_args["clst_weight"]
    real = ProtoPNet.loss_terms

    def non_finite_for_one(self, batch, stage, epoch):
        terms = real(self, batch, stage, epoch)
        if self.loss_weights["clst"] == doomed:
            terms["ce"] = terms["ce"] * float("nan")
        return terms

    cache = root / "cache"
    alone = execute_run(specs[2], root / "fail" / "alone" / specs[2].run_id, cache_root=cache, progress=False)
    monkeypatch.setattr(ProtoPNet, "loss_terms", non_finite_for_one)
    dirs = [root / "fail" / "batch" / s.run_id for s in specs]
    outcomes = run_batch(specs, dirs, cache_root=cache, loaded=Loaded(), hooks=[None] * 3, step="per-member")
    assert isinstance(outcomes[1], NonFiniteLossError)
    assert not (dirs[1] / "result.json").exists()
    failure = json.loads((dirs[1] / "failure.json").read_text())
    assert failure["reason"].startswith("NonFiniteLossError: non-finite loss") and "epoch_means" in failure["traceback"]
    assert outcomes[2]["metrics"] == alone["metrics"]
    assert (dirs[0] / "result.json").exists()


def test_trials_that_switch_different_terms_on_step_one_by_one(tuning):
    """The vectorised step runs the first trial's code, whose ``uses`` decides which terms every
    trial computes: a first trial with λ_ppd = 0 would drop the others' L_ppd. Such a batch steps
    each trial on its own, so the second trial equals the trial trained alone bit for bit."""
    root, grid = tuning
    specs = _specs(grid, "vmfproto", 2)
    specs[0] = specs[0].with_overrides(method_args={**specs[0].method_args, "lambda_ppd": 0.0})
    cache = root / "cache"
    alone = execute_run(specs[1], root / "terms" / "alone" / specs[1].run_id, cache_root=cache, progress=False)
    dirs = [root / "terms" / "batch" / s.run_id for s in specs]
    together = run_batch(specs, dirs, cache_root=cache, loaded=Loaded(), hooks=[None] * 2, step="vectorised")
    assert together[1]["metrics"] == alone["metrics"]
    assert "switch different loss terms on" in (dirs[1] / "log.txt").read_text()


def _summaries(runs: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["cell"]["method"]: json.loads(p.read_text())
            for p in sorted((runs / "tun.tuning").glob("*/summary.json"))}


def test_tune_batch_ends_every_cell_with_exactly_n_trials(tuning, capsys):
    root, grid = tuning
    runs = root / "runs"
    assert main(["tune", str(grid), "--trials", "3", "--batch", "2", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "up to 2 trials trained together (TPE with constant liar)" in out
    assert out.count("--batch 2 is more than the 1 trial(s) left of the budget of 3: this batch trains 1") == 2
    for method, summary in _summaries(runs).items():
        assert summary["complete"] == summary["finished"] == 3 and summary["counts"] == {"COMPLETE": 3}, method
        assert summary["trials"][0]["params"] == summary["default"]["params"]
        assert len({t["run_id"] for t in summary["trials"]}) == 3
        for trial in summary["trials"][:2]:  # the first two trained together
            log = (runs / "tun.tuning" / "trials" / trial["run_id"] / "log.txt").read_text()
            assert "trained in a batch of trials" in log
            assert (runs / "tun.tuning" / "trials" / trial["run_id"] / "result.json").exists()


def test_batched_trials_are_pruned_one_by_one(tmp_path, monkeypatch, capsys):
    """With pruning, each trial of a batch gets its own decision: the defaults are never pruned,
    the others are (a pruner that prunes everything it is asked), and pruned ones count."""
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data", keys="prune = true\n")
    monkeypatch.setattr(study_module, "pruner", lambda prune: optuna.pruners.ThresholdPruner(lower=101.0)
                        if prune else optuna.pruners.NopPruner())
    runs = tmp_path / "runs"
    assert main(["tune", str(grid), "--trials", "3", "--batch", "3", "--only", "method=vmfproto",
                 "--runs-dir", str(runs)]) == 0
    summary = _summaries(runs)["vmfproto"]
    assert summary["counts"] == {"COMPLETE": 1, "PRUNED": 2} and summary["finished"] == 3
    assert summary["trials"][0]["state"] == "COMPLETE"
    for trial in summary["trials"][1:]:
        run_dir = runs / "tun.tuning" / "trials" / trial["run_id"]
        assert (run_dir / "pruned.json").exists() and not (run_dir / "result.json").exists()


def test_a_method_that_does_not_batch_runs_one_by_one_and_says_so_once(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    write_tiny_grid(grid, "lp", tmp_path / "data", device="cpu", method="linear_probe",
                    method_args={"epochs": 1})
    grid.write_text(grid.read_text() + "[tuning]\nsampler = \"random\"\n")
    assert main(["tune", str(grid), "--trials", "3", "--batch", "4", "--runs-dir", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert out.count("linear_probe does not train trials in batches") == 1
    assert "its trials run one by one, not 4 at a time" in out and "3/3 complete" in out


@pytest.mark.parametrize("batch", ["0", "-2"])
def test_a_batch_below_one_is_refused_before_compute(tuning, monkeypatch, capsys, batch):
    _, grid = tuning

    def no_compute(self):
        raise AssertionError("a refused --batch reached the workers")

    monkeypatch.setattr(workers.TuneJob, "__call__", no_compute)
    assert main(["tune", str(grid), "--trials", "2", "--batch", batch]) != 0
    assert f"--batch {batch} must be ≥ 1" in capsys.readouterr().err


def test_perf_tuning_rows_and_the_plan_that_reads_them(tuning, capsys):
    root, grid = tuning
    out = root / "perf.json"
    assert main(["perf", str(grid), "--only", "method=protopnet,vmfproto", "--tuning", "2", "--out", str(out),
                 "--timed-batches", "1", "--warmup", "0", "--runs-dir", str(root / "perf-runs"),
                 "--batch-step", "vectorised"]) == 0
    document = json.loads(out.read_text())
    assert isinstance(document["rows"], list) and len(document["rows"]) == 4  # 2 methods × seeds 0, 1
    rows = {row["method"]: row for row in document["tuning"]}
    assert sorted(rows) == ["protopnet", "vmfproto"]
    for row in rows.values():
        assert row["k"] == 2 and row["sequential_s"] > 0 and row["packed_s"] > 0 and row["batched_s"] > 0
        assert row["max_abs_diff_batched"] <= ACCURACY_TOLERANCE and row["max_abs_diff_packed"] == 0.0
        assert row["one_trial_s"] > 0 and set(row["trials_per_hour"]) == {"sequential", "packed", "batched"}
    capsys.readouterr()
    assert main(["plan", str(grid), "--perf", str(out), "--tuning-trials", "3"]) == 0
    plan = capsys.readouterr().out
    for method, row in rows.items():
        factor = min(row["packed_s"], row["batched_s"]) / row["sequential_s"]
        line = next(line for line in plan.splitlines() if line.strip().startswith(method))
        assert f"× {factor:.2f} (" in line and "over sequential ones, perf --tuning on a CPU)" in line
    # measured on this CPU: the plan says its seconds and ratios are not the GPU model's
    assert "caution: the perf file was measured on a CPU" in plan and "not H100 figures" in plan


def test_perf_tuning_refuses_a_cell_outside_its_space_before_compute(tmp_path, monkeypatch, capsys):
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data",
                             tuning="[tuning.replace.protopnet]\nclst_weight = { kind = \"uniform\", low = 1.0, high = 2.0 }\n")

    def no_compute(*args, **kwargs):
        raise AssertionError("perf measured before refusing the tuning cell")

    monkeypatch.setattr(perf_module, "measure", no_compute)
    assert main(["perf", str(grid), "--only", "method=protopnet", "--tuning", "2"]) != 0
    assert "clst_weight = 0.8 lies outside its search space" in capsys.readouterr().err


def test_a_perf_file_with_a_broken_tuning_row_is_one_error(tmp_path, tuning, capsys):
    _, grid = tuning
    bad = tmp_path / "perf.json"
    bad.write_text(json.dumps({"rows": [], "tuning": [{"method": "protopnet", "k": 2}]}))
    assert main(["plan", str(grid), "--perf", str(bad), "--tuning-trials", "3"]) != 0
    assert "tuning row 'protopnet' lacks sequential_s, packed_s, batched_s" in capsys.readouterr().err
