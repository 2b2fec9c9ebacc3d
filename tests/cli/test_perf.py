"""``protobench perf``: one trunk for all rows, every stage timed, training steps interleaved
batch by batch across rows, medians with spread, the paper-scale preset, clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import benchmark.estimates.perf as perf
from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.grid import parse_grid
from benchmark.run.timing import interleaved_seconds
from benchmark.estimates.perf import Spread, measure, paper_scale_grid, prepare_sharing_trunks
from benchmark.estimates.costs import load_perf
from benchmark.estimates.plan import make_plan
from benchmark.estimates.workload import split_images
from benchmark.cluster import ClusterProfile
from short_schedules import ONE_EPOCH, TWO_EPOCHS
from tiny_grid import tiny_grid_table


@pytest.mark.parametrize("values", [[3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], [0.3, 0.1, 0.2, 0.9, 0.5, 0.4]])
def test_spread_is_numpys_median_quartiles_and_range(values: list[float]) -> None:
    spread = Spread.of(values)
    assert spread.median == pytest.approx(np.median(values))
    assert spread.q1 == pytest.approx(np.percentile(values, 25))  # numpy's default: linear = inclusive
    assert spread.q3 == pytest.approx(np.percentile(values, 75))
    assert (spread.low, spread.high, spread.count) == (min(values), max(values), len(values))


def test_inference_forwards_take_turns_and_rotate_which_runs_first() -> None:
    calls: list[tuple[str, int]] = []

    def forward(name: str):
        return lambda images: calls.append((name, int(images)))

    seconds = interleaved_seconds([forward("trunk"), forward("a"), forward("b")],
                                        [torch.tensor(b) for b in range(4)], torch.device("cpu"), warmup=1)
    assert [len(s) for s in seconds] == [3, 3, 3]  # the warm-up batch is not timed
    assert [name for name, _ in calls] == ["trunk", "a", "b", "a", "b", "trunk", "b", "trunk", "a",
                                           "trunk", "a", "b"]
    assert [b for _, b in calls] == [b for b in range(4) for _ in range(3)]  # batch by batch


@pytest.mark.parametrize(("q1", "fault"), [(0.95, False), (1.0, False), (1.01, True)])
def test_a_ratio_above_one_beyond_its_spread_is_a_measurement_fault(q1: float, fault: bool) -> None:
    assert perf.inference_fault({"median": 1.05, "q1": q1, "q3": 1.1, "min": 0.9, "max": 1.2}) is fault


def test_paper_scale_preset_is_the_papers_setting() -> None:
    grid = paper_scale_grid()
    assert sorted(r.method for r in grid.runs) == sorted(perf.PAPER_SCALE_METHODS)
    for spec in grid.runs:
        assert (spec.backbone, spec.weights, spec.prototypes_per_class, spec.batch_size) == \
            ("dinov2_vitb14", "random", 5, 128)
        assert spec.dataset_args["classes"] == 200  # C = 200 heads
        # one training image per class (nothing CUB-sized); KMEx clusters J per class into J prototypes
        assert split_images(spec, "train") == 200 * (spec.prototypes_per_class if spec.method == "kmex" else 1)


def two_method_grid(root: Path) -> object:
    """vMFProto and NPPP for 2 epochs each on the tests' tiny grid (3 classes × 6 images)."""
    return parse_grid(tiny_grid_table(
        "tiny", root / "synthbirds", dataset_args={"classes": 3, "images_per_class": 6, "seed": 0}, batch_size=4,
        eval_batch_size=6, seed=0, device="cpu", without=("method",),
        sweep=[{"method": "vmfproto", "method_args": {"end_to_end_epochs": 2}},
               {"method": "nppp", "method_args": {"finetune_epochs": 2}}]), source="tests/cli/test_perf.py")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("perf")
    grid = two_method_grid(root)
    preps = prepare_sharing_trunks(list(grid.runs))
    calls: list[str] = []
    real = perf.run_epoch

    def recording(method, *args, **kwargs):
        calls.append(f"{method.name}/{args[1].name}")
        return real(method, *args, **kwargs)

    perf.run_epoch = recording
    try:
        rows = measure(preps, root / "cache", warmup=1, timed_batches=3, baseline=1)
    finally:
        perf.run_epoch = real
    return root, preps, rows, calls


def test_rows_share_one_trunk(measured) -> None:
    _, preps, _, _ = measured
    assert preps[0].trunk is preps[1].trunk


def test_training_steps_take_turns_on_every_batch(measured) -> None:
    _, _, _, calls = measured
    cycle = ["vmfproto/discovery", "vmfproto/end_to_end", "nppp/discovery", "nppp/finetune", "vmfproto/end_to_end"]
    assert calls[-3 * len(cycle):] == cycle * 3  # 3 timed batches; the last: the live-trunk step


def test_every_stage_hook_and_evaluation_is_timed(measured) -> None:
    _, _, rows, _ = measured
    vmf, nppp = rows
    assert [s["name"] for s in vmf["stages"]] == ["discovery", "end_to_end"]
    assert [s["epochs"] for s in nppp["stages"]] == [1, 2]
    for row in rows:
        assert row["evaluate_seconds"] > 0 and row["test_images"] == 9
        for stage in row["stages"]:
            assert stage["step_seconds"]["count"] == 3
            assert stage["step_seconds"]["min"] <= stage["step_seconds"]["median"] <= stage["step_seconds"]["max"]
            assert stage["on_stage_start_seconds"] >= 0 and stage["on_epoch_end_seconds"] >= 0
        assert row["inference_ratio_method_over_trunk"]["count"] == 3
        assert row["inference_measurement_fault"] == perf.inference_fault(row["inference_ratio_method_over_trunk"])
    assert nppp["epoch_ratio_over_baseline"]["median"] == 1.0  # baseline=1: NPPP over itself
    assert "epoch_seconds_recomputing_trunk" in vmf and "epoch_seconds_recomputing_trunk" not in nppp
    assert (vmf["classes"], vmf["prototypes_per_class"], vmf["embed_dim"], vmf["tokens"]) == (3, 2, 48, 256)
    # vMFProto's gate is computed once per run (frozen features); NPPP has none
    assert vmf["frozen_features_seconds_per_image"] > 0 and nppp["frozen_features_seconds_per_image"] is None


def test_plan_reads_what_perf_writes(measured, tmp_path: Path) -> None:
    root, preps, rows, _ = measured
    path = tmp_path / "perf.json"
    path.write_text(json.dumps(rows))
    costs = load_perf(path)
    plan = make_plan(two_method_grid(root), ClusterProfile(), costs)
    assert [r.source.split(" (")[0] for r in plan.runs] == ["measured", "measured"]
    assert all(r.hours > 0 for r in plan.runs)


def test_cli_errors_before_compute(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text('name = "g"\n[defaults]\ndataset = "synthbirds"\nbackbone = "dinov2_vits14"\n'
                    'method = "vmfproto"\nprototypes_per_class = 2\n')
    assert main(["perf", str(grid), "--paper-scale"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["perf", str(grid), "--timed-batches", "0"]) == 2
    assert "--timed-batches 0 must be ≥ 1" in capsys.readouterr().err
    assert main(["perf", "--paper-scale", "--only", "method=vmfproto", "--baseline", "nppp"]) == 2
    assert "--baseline 'nppp' is not a method of the selected runs" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ProtobenchError, match="matches no run"):
        from benchmark.grid import select_runs
        select_runs(paper_scale_grid(), ["method=nope"])


def test_every_method_goes_through_perf(tmp_path: Path) -> None:
    grid = parse_grid({"name": "all", "defaults": {
        "dataset": "synthbirds", "data_root": str(tmp_path / "synthbirds"),
        "dataset_args": {"classes": 2, "images_per_class": 4, "seed": 0},
        "backbone": "dinov2_vits14", "weights": "random",
        "backbone_args": {"depth": 4, "embed_dim": 48, "num_heads": 2},
        "batch_size": 4, "eval_batch_size": 4, "prototypes_per_class": 2, "seed": 0, "device": "cpu"},
        "sweep": [{"method": m, "method_args": a} for m, a in TWO_EPOCHS.items()]}, source="t")
    rows = measure(prepare_sharing_trunks(list(grid.runs)), tmp_path / "cache", warmup=1, timed_batches=1)
    assert [r["method_name"] for r in rows] == list(TWO_EPOCHS)
    assert all(sum(s["epochs"] for s in r["stages"]) == (1 if r["method_name"] in ONE_EPOCH else 2) for r in rows)
