"""A hostile run file costs its own row, never the directory: a result.json with a huge integer or
deep nesting in `status`, `report` and `export`, a spec.json that is a list, a job record with an
unknown key. (Source: the fault campaign of issue 18.)"""
from __future__ import annotations

from pathlib import Path

import pytest
from reports_support import write_run
from tiny_grid import tiny_grid

from benchmark.cli import main
from benchmark.run.store import RunDir, atomic_write_json
from benchmark.run.pending import pending_runs
from benchmark.run.states import JOB_FILE


def runs_with_one_hostile_result(root: Path, hostile: str, file: str = "result.json") -> Path:
    """Two finished (current) runs and a third whose ``file`` holds ``hostile``; the bad file's path."""
    spec = tiny_grid("camp", root / "data").runs[0]
    for index, name in enumerate(("good-a", "good-b", "bad")):
        run = root / "runs" / "camp" / name
        atomic_write_json(run / "spec.json", spec.with_overrides(seed=index).to_json())
        write_run(root / "runs" / "camp", name, seed=index)
    bad = root / "runs" / "camp" / "bad" / file
    bad.write_text(hostile)
    return bad


HOSTILE = {
    "huge-integer": '{"run_id": "bad", "metrics": {"acc": 1' + "0" * 5000 + "}}",
    "deep-nesting": "[" * 100_000 + "]" * 100_000,
}


# ---- security: hostile run files ------------------------------------------------------------------
@pytest.mark.parametrize("hostile", list(HOSTILE))
def test_security_a_hostile_result_costs_one_row_in_status(
        tmp_path: Path, hostile: str, capsys: pytest.CaptureFixture[str]) -> None:
    bad = runs_with_one_hostile_result(tmp_path, HOSTILE[hostile])
    assert main(["status", str(tmp_path / "runs")]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "3 runs: 2 done, 1 unreadable" in out and f"{bad} is unreadable" in out


@pytest.mark.parametrize("command", ["report", "export"])
def test_security_a_hostile_result_costs_one_row_in_reports(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    bad = runs_with_one_hostile_result(tmp_path, HOSTILE["huge-integer"])
    out = ["--out", str(tmp_path / "all.csv")] if command == "export" else []
    assert main([command, str(tmp_path / "runs"), *out]) == 0
    assert f"skipped {bad} is malformed" in capsys.readouterr().err


def test_security_a_spec_json_that_is_a_list_costs_one_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = runs_with_one_hostile_result(tmp_path, "[1, 2]", file="spec.json")
    assert main(["status", str(tmp_path / "runs")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "3 runs: 3 done" in out and f"{bad} is unreadable" in out


def test_security_a_job_record_with_an_unknown_key_does_not_stop_the_grid(tmp_path: Path) -> None:
    grid = tiny_grid("camp", tmp_path / "data", js=(2, 3))
    runs_root = tmp_path / "runs"
    first = grid.run_dir(runs_root, grid.runs[0])
    atomic_write_json(first / JOB_FILE, {"submissions": [{"executor": "slurm", "jnb_id": "7_0", "submitted": "t",
                                                          "submitit_folder": "/x"}]})
    todo, settled = pending_runs(grid, list(grid.runs), runs_root, retry_failed=False)
    assert todo == list(grid.runs) and settled == []
    assert RunDir(first).state == "new"
