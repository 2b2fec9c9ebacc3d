"""``status`` reads in method/J/seed order and fits 100 columns; ``--wide`` shows every column."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.cli import main
from reports_support import write_run


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs" / "g"
    for method in ("vmfproto", "protopnet"):
        for j in (10, 5):
            for seed in (1, 0):
                result = write_run(root, f"{method}-{j}-{seed}", method=method, J=j, seed=seed,
                                   metrics={"acc": 80.0 + j + seed, "con": 50.0})
                spec = json.loads(result.read_text())["spec"]
                (result.parent / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def rows(out: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines()
            if "│" in line and ("ProtoPNet" in line or "vMFProto" in line)]


def test_status_sorts_by_method_j_seed_and_fits_100_columns(runs: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # room enough: the width is the table's own
    assert main(["status", str(runs)]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 100
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    assert "backbone" not in header and "dataset" not in header and "progress" not in header
    keys = [(r[3], int(r[4]), int(r[5])) for r in rows(out)]
    assert keys == [(m, j, s) for m in ("ProtoPNet", "vMFProto") for j in (5, 10) for s in (0, 1)]
    assert {r[2] for r in rows(out)} == {"current"}  # each finished run's code state, in words
    assert main(["status", str(runs), "--wide"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("┃"))
    assert all(name in header for name in ("grid", "backbone", "dataset", "warnings", "progress"))
