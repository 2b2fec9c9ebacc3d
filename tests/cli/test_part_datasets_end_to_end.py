"""`make-data nabirds|partimagenet`, `doctor` and a KMEx grid end to end through the CLI, on the
generated sets with a tiny random trunk: the doctor passes the data, and the result scores
accuracy, consistency and stability as numbers (docs/protocol/nabirds.md, partimagenet.md)."""
from __future__ import annotations

import json
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


def _corrupt_nabirds(data: Path) -> None:
    path = data / "parts" / "part_locs.txt"
    lines = path.read_text().splitlines()
    lines[2] = f"{lines[2].split()[0]} 11 1 1 1"
    path.write_text("\n".join(lines) + "\n")


def _corrupt_partimagenet(data: Path) -> None:
    path = data / "annotations" / "test" / "test.json"
    content = json.loads(path.read_text())
    content["annotations"][1]["image_id"] = 999
    path.write_text(json.dumps(content))


@pytest.mark.parametrize(("kind", "corrupt", "says"), [
    ("nabirds", _corrupt_nabirds, "parts/part_locs.txt, line 3: part id 11 is not listed in parts/parts.txt"),
    ("partimagenet", _corrupt_partimagenet, "test.json, line 1 (annotations[1]): image_id 999 is not listed"),
])
def test_doctor_names_a_corrupt_annotation_line_by_file_and_line(tmp_path: Path, monkeypatch, capsys, kind: str,
                                                                 corrupt, says: str) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    data = tmp_path / kind
    assert main(["make-data", kind, "--out", str(data), "--classes", "2", "--images-per-class", "2"]) == 0
    corrupt(data)
    grid = write_tiny_grid(tmp_path / "grid.toml", kind, data, dataset=kind, method="kmex", device="cpu",
                           without=("dataset_args",))
    assert main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache")]) == 1
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith(f"[fail] data {kind}")]
    assert says in line, line
