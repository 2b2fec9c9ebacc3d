"""`make-data nabirds|partimagenet`, `doctor` and a KMEx grid end to end through the CLI, on the
generated sets with a tiny random trunk: the doctor passes the data, and the result scores
accuracy, consistency and stability as numbers (docs/protocol/nabirds.md, partimagenet.md)."""
from __future__ import annotations

import math
from pathlib import Path

import huggingface_hub.constants
import pytest

from benchmark.cli import main
from benchmark.run.store import find_run_dirs
from tiny_grid import write_tiny_grid


@pytest.mark.parametrize(("kind", "train", "test"), [("nabirds", 6, 6), ("partimagenet", 6, 3)])
def test_make_data_doctor_and_a_kmex_grid_score_acc_con_and_sta(tmp_path: Path, monkeypatch, capsys, kind: str,
                                                                train: int, test: int) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    data = tmp_path / kind
    assert main(["make-data", kind, "--out", str(data), "--classes", "3", "--images-per-class", "4"]) == 0
    assert f"wrote {kind} (3 classes × 4 images, seed 0) to {data}" in capsys.readouterr().out
    grid = write_tiny_grid(tmp_path / "grid.toml", kind, data, dataset=kind, method="kmex", device="cpu",
                           without=("dataset_args",))
    assert main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert f"[  ok] data {kind} {data}: {train} train / {test} test images listed" in out, out

    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs")]) == 0
    (run,) = find_run_dirs(tmp_path / "runs")
    result = run.result()
    for key in ("acc", "con", "sta"):
        value = result["metrics"][key]
        assert isinstance(value, float) and math.isfinite(value) and 0 <= value <= 100, (key, value)
    assert result["evaluation"]["num_images"] == test and result["evaluation"]["noise_seed"] is not None
    assert result["metrics"]["purity"] is not None  # the training split's parts are read too
    if kind == "partimagenet":  # the object is the union of its part masks
        assert result["metrics"]["comp"] is not None and result["metrics"]["loc"] is not None
    else:  # NABirds has no segmentation masks
        assert result["metrics"]["comp"] is None and "segmentation masks missing" in result["metric_notes"]["comp"]
