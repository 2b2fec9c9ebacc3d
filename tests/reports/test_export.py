"""``protobench export``: one flat row per run with dotted columns, to CSV, JSON Lines and Parquet."""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from reports.columns import flatten
from reports.export import export_records, write_export
from reports.load import load_runs
from reports_support import RUNS, write_run

SMOKE = RUNS / "smoke" / "4c037f0069db" / "result.json"


def test_flatten_uses_dotted_names_and_keeps_empty_mappings() -> None:
    nested = {"spec": {"seed": 0, "method_args": {}}, "timing": {"stage_seconds": {"a": 1.0}}, "grid": [16, 16]}
    assert flatten(nested) == {
        "spec.seed": 0, "spec.method_args": {}, "timing.stage_seconds.a": 1.0, "grid": [16, 16]}


def test_csv_has_one_row_per_run_with_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "all.csv"
    assert main(["export", str(RUNS), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert len(rows) == len(list(RUNS.rglob("result.json")))
    assert capsys.readouterr().out == f"wrote {len(rows)} run(s) to {out}\n"
    smoke = json.loads(SMOKE.read_text())
    row = next(r for r in rows if r["run_id"] == smoke["run_id"])
    for field, value in smoke["spec"].items():  # every spec field, as the JSON has it
        assert row[f"spec.{field}"] == (json.dumps(value) if isinstance(value, dict) else str(value))
    assert float(row["metrics.acc"]) == smoke["metrics"]["acc"]
    assert float(row["timing.stage_seconds.discovery"]) == smoke["timing"]["stage_seconds"]["discovery"]
    assert row["provenance.packages.torch"] == smoke["provenance"]["packages"]["torch"]
    assert json.loads(row["evaluation.map_grid"]) == smoke["evaluation"]["map_grid"]
    assert row["run_dir"] == str(SMOKE.parent)
    assert list(rows[0])[:4] == ["run_id", "grid", "run_dir", "method_display_name"]


def test_jsonl_flattens_diagnostics_and_keeps_lists(tmp_path: Path) -> None:
    diagnostics = {"ot": {"marginal_error": 0.01, "iterations": [10, 10]}, "kappa_mean": 52.5}
    write_run(tmp_path / "runs", "a", method="example_adapter:CosinePrototypes",
              method_display_name="Cosine prototypes", diagnostics=diagnostics)
    write_run(tmp_path / "runs", "b")
    out = tmp_path / "runs.jsonl"
    write_export(export_records(load_runs([tmp_path / "runs"], csv=False)), out)
    first, second = (json.loads(line) for line in out.read_text(encoding="utf-8").splitlines())
    assert first["diagnostics.ot.marginal_error"] == 0.01 and first["diagnostics.kappa_mean"] == 52.5
    assert first["diagnostics.ot.iterations"] == [10, 10]
    assert first["method_display_name"] == "Cosine prototypes"
    assert first["spec.method"] == "example_adapter:CosinePrototypes"
    assert second["diagnostics.ot.marginal_error"] is None and list(first) == list(second)  # one schema


def test_unknown_suffix_fails_before_reading_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ProtobenchError, match=r"unknown file type '\.xlsx'; end the name with \.csv"):
        main_raising(["export", str(tmp_path / "not-there"), "--out", str(tmp_path / "x.xlsx")])
    assert list(tmp_path.iterdir()) == []


def test_parquet_without_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(ProtobenchError, match=r"needs pyarrow.*protobench\[parquet\]"):
        write_export(export_records(load_runs([RUNS], csv=False)), tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow (the parquet extra) not installed")
def test_parquet_round_trips_through_pandas(tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "runs.parquet"
    write_export(export_records(load_runs([RUNS], csv=False)), out)
    frame = pd.read_parquet(out)
    smoke = json.loads(SMOKE.read_text())
    row = frame[frame["run_id"] == smoke["run_id"]].iloc[0]
    assert len(frame) == len(list(RUNS.rglob("result.json"))) and row["metrics.con"] == smoke["metrics"]["con"]


def main_raising(argv: list[str]) -> None:
    """Run a CLI command through its parser but let the ProtobenchError through (main prints it)."""
    from benchmark.cli import build_parser

    args = build_parser().parse_args(argv)
    args.func(args)
