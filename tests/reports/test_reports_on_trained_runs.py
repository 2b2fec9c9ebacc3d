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
