"""The runtime table's epoch with the trunk in the loop (``measure_live_epoch``): recorded next to
the cached epoch time in ``result.json``, one trunk forward per training batch of each stage,
and no effect on the run id or the metrics."""
import math
from pathlib import Path

import pytest

from benchmark.config import build_run_spec
from benchmark.run.timing import live_trunk_epoch_seconds
from benchmark.run.prepare import prepare
from benchmark.run.runner import execute_run

BATCH = 4


def tiny(root: Path, **extra: object) -> dict:
    return {
        "dataset": "synthbirds", "data_root": str(root),
        "dataset_args": {"classes": 2, "images_per_class": 6, "seed": 0},
        "backbone": "dinov2_vits14", "weights": "random",
        "backbone_args": {"depth": 1, "embed_dim": 24, "num_heads": 2}, "image_size": 56,
        "batch_size": BATCH, "eval_batch_size": 8, "method": "nppp", "prototypes_per_class": 2,
        "method_args": {"discovery_epochs": 1, "finetune_epochs": 2}, **extra,
    }


def test_live_trunk_epoch_runs_the_trunk_on_every_batch_of_every_stage(tmp_path: Path) -> None:
    prep = prepare(build_run_spec(tiny(tmp_path / "synthbirds"), where="test"))
    calls = []
    handle = prep.trunk.register_forward_hook(lambda module, args, out: calls.append(len(args[0])))
    try:
        timing = live_trunk_epoch_seconds(prep.method, prep.train_source(None), seed=prep.spec.seed,
                                          batch_size=prep.spec.batch_size, device=prep.device)
    finally:
        handle.remove()
    n = len(prep.train_set)
    per_stage = timing["live_trunk_stage_epoch_seconds"]
    assert list(per_stage) == ["discovery", "finetune"]
    # one epoch per stage, every batch through the trunk: 2 × ⌈n / 4⌉ forwards covering 2n images
    assert len(calls) == 2 * math.ceil(n / BATCH) and sum(calls) == 2 * n
    # the schedule has 1 discovery and 2 fine-tuning epochs
    assert timing["epoch_seconds_live_trunk"] == pytest.approx(
        (per_stage["discovery"] + 2 * per_stage["finetune"]) / 3)


def test_a_run_records_both_epoch_times_and_keeps_its_id(tmp_path: Path) -> None:
    plain = build_run_spec(tiny(tmp_path / "synthbirds"), where="test")
    timed = build_run_spec(tiny(tmp_path / "synthbirds", measure_live_epoch=True), where="test")
    assert timed.run_id == plain.run_id  # a timing switch, not science
    result = execute_run(timed, tmp_path / "runs" / timed.run_id, cache_root=tmp_path / "cache", progress=False,
                         log=lambda line: None)
    timing = result["timing"]
    assert timing["epoch_seconds"] > 0 and timing["epoch_seconds_live_trunk"] > 0
    assert set(timing["live_trunk_stage_epoch_seconds"]) == {"discovery", "finetune"}
    untimed = execute_run(plain, tmp_path / "runs2" / plain.run_id, cache_root=tmp_path / "cache", progress=False,
                          log=lambda line: None)
    assert "epoch_seconds_live_trunk" not in untimed["timing"]
    assert untimed["metrics"] == result["metrics"]  # timed after evaluation: the science is unchanged
