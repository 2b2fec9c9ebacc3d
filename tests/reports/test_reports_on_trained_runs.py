"""Reports on real runs: a tiny grid of a method named by import path (tests/helpers/example_adapter.py)
trained through the CLI, then ``report`` (no layout), ``export`` and ``plot`` on its runs."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from benchmark.cli import main
from reports_support import markdown_rows
from tiny_grid import write_adapter_grid

METHOD = "example_adapter:CosinePrototypes"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("custom")
    grid = work / "custom.toml"
    write_adapter_grid(grid, work / "synthbirds")
    assert main(["run", str(grid), "--runs-dir", str(work / "runs")]) == 0
    return work / "runs" / "custom"


def results(runs: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(runs.rglob("result.json"))]


def test_runner_records_the_display_name(runs: Path) -> None:
    assert [r["method_display_name"] for r in results(runs)] == ["Cosine prototypes"] * 2


def test_report_shows_the_custom_method_by_display_name(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["report", str(runs), "--metrics", "acc"]) == 0
    accs = [r["metrics"]["acc"] for r in results(runs)]
    mean, std = statistics.fmean(accs), statistics.stdev(accs)
    assert markdown_rows(capsys.readouterr().out) == [["Cosine prototypes", f"{mean:.1f}±{std:.1f} (n=2)"]]  # one row: no bold


def test_export_has_both_runs_with_method_and_display_name(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "custom.csv"
    assert main(["export", str(runs), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [(r["spec.method"], r["method_display_name"], r["spec.seed"]) for r in rows] == [
        (METHOD, "Cosine prototypes", str(r["spec"]["seed"])) for r in results(runs)]
    assert all(float(r["metrics.acc"]) == res["metrics"]["acc"] for r, res in zip(rows, results(runs)))


def test_plot_of_the_runs(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "acc.pdf"
    assert main(["plot", str(runs), "--x", "seed", "--y", "acc", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"%PDF")


def test_every_eval_ever_submission_of_the_trained_runs_validates(runs: Path, tmp_path: Path) -> None:
    # the real runs' per-image records through `export --format eee --layout submission`: every record
    # against eval.schema.json 0.3.0, every samples line against instance_level_eval.schema.json, the
    # checksum the samples file's SHA-256; the import-path method's ':' becomes '_' in its folder
    import hashlib

    from eee_support import instance_validator, validator

    out = tmp_path / "E"
    assert main(["export", str(runs), "--format", "eee", "--layout", "submission", "--developer", "lab-a",
                 "--out", str(out)]) == 0
    records = sorted(out.glob("data/*/*/*/*.json"))
    assert len(records) == len(results(runs)) == 2
    check, check_line = validator(), instance_validator()
    for path in records:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert list(check.iter_errors(record)) == []
        assert path.parent.name.startswith("example_adapter_CosinePrototypes-")
        detail = record["detailed_evaluation_results"]
        samples = out / detail["file_path"]
        assert samples.parent == path.parent and samples.name == f"{path.stem}_samples.jsonl"
        assert detail["checksum"] == hashlib.sha256(samples.read_bytes()).hexdigest()
        lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
        num_images = record["evaluation_results"][0]["source_data"]["additional_details"]["num_images"]
        assert len(lines) == detail["total_rows"] == int(num_images) > 0
        assert all(list(check_line.iter_errors(line)) == [] for line in lines)
        acc = next(r for r in record["evaluation_results"] if r["evaluation_result_id"] == "acc")
        assert 100 * sum(x["evaluation"]["score"] for x in lines) / len(lines) == \
            pytest.approx(acc["score_details"]["score"])
