"""`make-data funnybirds`, `doctor` and a grid on it end to end through the CLI (tiny random trunk): every
result records the FunnyBirds scores and the control row's, per image where defined; the interventions'
tokens sit in the token cache beside the test split's (docs/protocol/funnybirds.md)."""
from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub.constants
import pytest

from benchmark.cli import main
from benchmark.run.funnybirds_eval import FUNNYBIRDS_KEYS, PER_IMAGE_KEYS
from benchmark.run.records import read_records
from benchmark.run.store import find_run_dirs
from short_schedules import TWO_EPOCHS
from tiny_grid import write_tiny_grid


@pytest.mark.slow
def test_a_grid_on_generated_funnybirds_records_the_protocols_and_their_control(tmp_path: Path, monkeypatch,
                                                                                 capsys) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    data = tmp_path / "funnybirds"
    assert main(["make-data", "funnybirds", "--out", str(data), "--images-per-class", "2"]) == 0
    grid = write_tiny_grid(tmp_path / "grid.toml", "funnybirds", data, dataset="funnybirds", method="protopnet",
                           device="cpu", without=("dataset_args",), method_args=TWO_EPOCHS["protopnet"])
    assert main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache")]) == 0
    capsys.readouterr()
    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs")]) == 0
    (run,) = find_run_dirs(tmp_path / "runs")
    result = run.result()
    details = result["funnybirds"]
    scores = details["scores"]
    for key in FUNNYBIRDS_KEYS:
        assert scores[key] is None or 0 <= scores[key] <= 100, (key, scores[key])
    assert scores["sd"] is not None and scores["bi"] is not None and scores["mx"] is not None
    assert scores["acc"] == result["metrics"]["acc"]  # the protocols' accuracy is the run's
    assert "csdc" not in result["metrics"]  # FunnyBirds' scores keep their own section: its Con is not con
    # the suite's part metrics read the part maps as part masks (consistency, stability with the noise view, ...)
    assert all(result["metrics"].get(key) is not None for key in ("con", "sta", "dis", "comp", "loc"))
    assert set(FUNNYBIRDS_KEYS) <= set(details["control"]) and details["control"]["acc"] is not None
    boxes = details["protopnet_boxes"]  # ProtoPNet's published reading, beside the headline
    assert set(boxes) >= {"csdc", "pc", "dc", "d", "com", "best_threshold"}
    assert details["interventions"] == 9 * 32 + sum(len(p["bg_objects"].split(","))
                                                    for p in json.loads((data / "dataset_test.json").read_text()))
    per_image = read_records(run.path)
    assert set(PER_IMAGE_KEYS) <= set(per_image.columns) and len(per_image) == 9
    assert sum(1 for entry in (tmp_path / "runs" / ".token-cache").iterdir() if entry.is_dir()) >= 4  # + noise view
    # re-evaluated (`protobench evaluate RUN_DIR --rescore`), the run keeps its FunnyBirds section and columns
    assert main(["evaluate", str(run.path), "--rescore"]) == 0
    again = run.result()
    assert again["funnybirds"]["scores"] == scores and set(PER_IMAGE_KEYS) <= set(read_records(run.path).columns)
