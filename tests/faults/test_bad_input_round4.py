"""Bad inputs of the fourth campaign (issue 30, defects 7, 8 and 9): each is one line naming the
thing and the fix, exit status 2, before compute.

Cases and verdicts:

- an input CSV whose ``acc`` is ``inf``, ``1e999``, a 5000-digit numeral, ``-1e308`` or ``nan``
  (and a ``con_std`` of -1): ``report`` refuses it naming the row (line) and the column;
- ``backbone = "syntaxtrunk:f"`` (``plan`` and ``run``), ``method = "syntaxadapter:M"``, whose
  module does not parse: one line naming the file and the line, no traceback;
- ``cancel path/to/missing.toml``: names the missing grid file.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from tiny_grid import write_tiny_grid

from benchmark.cli import main

HEADER = "dataset,backbone,method,J,variant,acc\n"
GOOD_ROW = "cub,dinov2_vitb14,protopnet,5,default,40.0\n"


@pytest.mark.parametrize("cell, column", [("inf", "acc"), ("1e999", "acc"), ("1" + "0" * 5000, "acc"),
                                          ("-1e308", "acc"), ("nan", "acc"), ("100.5", "acc"), ("-1", "con_std")])
def test_bad_input_an_absurd_metric_in_an_input_csv_is_refused_naming_row_and_column(
        tmp_path: Path, cell: str, column: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absurd.csv"
    if column == "acc":
        path.write_text(HEADER + GOOD_ROW + f"cub,dinov2_vitb14,vmfproto,5,default,{cell}\n")
    else:
        path.write_text(HEADER.replace("acc", "acc,con,con_std") + "cub,dinov2_vitb14,vmfproto,5,default,40.0,50.0,"
                        f"{cell}\n")
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    line = 3 if column == "acc" else 2
    assert f"line {line}: column {column} = " in err and err.count("\n") == 0, err
    assert len(err) < 400  # a 5000-digit numeral is not printed whole


SYNTAX_ERROR = "def f(:\n    pass\n"


def test_bad_input_a_user_trunk_module_with_a_syntax_error_is_one_line_naming_file_and_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "syntaxtrunk.py").write_text(SYNTAX_ERROR)
    monkeypatch.syspath_prepend(str(tmp_path))
    grid = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "data", backbone="syntaxtrunk:f")
    assert main(["plan", str(grid)]) == 2
    err = capsys.readouterr().err.strip()
    assert "syntaxtrunk.py, line 1" in err and "Traceback" not in err and err.count("\n") == 0, err


def test_bad_input_an_own_adapter_module_with_a_syntax_error_is_one_line_naming_file_and_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "syntaxadapter.py").write_text(SYNTAX_ERROR)
    monkeypatch.syspath_prepend(str(tmp_path))
    grid = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "data", method="syntaxadapter:M")
    assert main(["plan", str(grid)]) == 2
    err = capsys.readouterr().err.strip()
    assert "syntaxadapter.py, line 1" in err and "Traceback" not in err and err.count("\n") == 0, err


def test_bad_input_cancel_of_a_missing_grid_file_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no runs/ here either
    assert main(["cancel", "path/to/missing.toml"]) == 2
    err = capsys.readouterr().err
    assert "grid file 'path/to/missing.toml' does not exist" in err and "runs directory" not in err.split(";")[0]
