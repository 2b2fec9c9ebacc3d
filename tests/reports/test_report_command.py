"""``protobench report`` as the CLI mounts it: add_report_arguments + run_report."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmark.errors import ProtobenchError
from benchmark.cli.results import FORMATS, add_report_arguments, run_report
from reports.layouts import LAYOUTS
from reports.load import load_csv, load_results
from reports.render import WRITERS, render_report
from reports_support import PAPER_CSV, RUNS, markdown_rows, write_run


def report(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="protobench report")
    add_report_arguments(parser)
    return run_report(parser.parse_args(list(argv)))


def test_list_names_every_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert report("--list") == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(LAYOUTS)


def test_markdown_to_stdout_and_missing_cells_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert report(str(RUNS), "--layout", "gating") == 0
    out, err = capsys.readouterr()
    assert out == render_report(load_results([RUNS]), "gating", "markdown").text
    lines = err.splitlines()
    assert lines[0].startswith("gating: ")  # what to act on first: tests/reports/test_pivot.py
    assert lines[1:7] == [
        "4 cell(s) of layout gating have no result:",
        "  4× no result has variant gating_attention",  # one line per reason, with its count
        *(f"    Attention only | {m}" for m in ("Con.", "Sta.", "Dis.", "Acc.")),  # few: listed too
    ]
    # the fixture runs predate run ids over resolved hyperparameters: flagged stale, one line each
    stale = [p for p in RUNS.rglob("result.json")]
    assert lines[7].startswith(f"{len(stale)} stale result(s) are included")
    assert len(lines) == 8 + len(stale)


def test_a_layout_far_from_the_results_summarises_its_empty_cells(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from reports_support import write_run

    write_run(tmp_path, "a", dataset="synthbirds")
    assert report(str(tmp_path), "--layout", "cub_main") == 1  # no cell filled: not a success
    err = capsys.readouterr().err.splitlines()
    cells = int(err[1].split()[0])
    assert err[0].startswith("cub_main: 1 result not in this layout (dataset synthbirds ≠ cub) — try")
    assert err[1:3] == [f"{cells} cell(s) of layout cub_main have no result:", f"  {cells}× no result has dataset cub"]
    assert err[3:] == ["protobench: no result fills any cell of layout cub_main (the lines above name the keys that "
                       "matched nothing); pick the layout of these runs (`report --list`) or drop --layout"]


def test_latex_against_paper_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tables" / "cub_main.tex"
    csv = PAPER_CSV / "cub_main.csv"
    args = (str(RUNS), "--layout", "cub_main", "--format", "latex", "--against", str(csv), "--decimals", "2")
    assert report(*args, "--out", str(out)) == 0
    expected = render_report(load_results([RUNS]), "cub_main", "latex", against=load_csv(csv), decimals=2)
    assert out.read_text(encoding="utf-8") == expected.text
    assert capsys.readouterr().out == ""


def test_usage_mistakes_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(ProtobenchError, match="--cols shape the table of every result"):
        report(str(RUNS), "--layout", "cub_main", "--cols", "J")
    with pytest.raises(ProtobenchError, match="--method-macro only applies to LaTeX"):
        report(str(RUNS), "--layout", "cub_main", "--method-macro")
    with pytest.raises(ProtobenchError, match="Unknown layout 'nope'"):
        report(str(tmp_path / "not-there"), "--layout", "nope")
    with pytest.raises(ProtobenchError, match="at least one RUNS_DIR"):
        report("--layout", "cub_main")
    with pytest.raises(ProtobenchError, match="does not exist"):
        report(str(RUNS), "--layout", "cub_main", "--against", str(tmp_path / "paper.csv"))


def test_report_regenerates_a_table_from_a_published_csv(capsys):
    from benchmark.cli import main

    paper = Path(__file__).resolve().parents[2] / "reports" / "paper" / "cub_main.csv"
    assert main(["report", str(paper), "--layout", "cub_main", "--format", "latex"]) == 0
    text = capsys.readouterr().out
    assert r"\textbf{98.7}" in text and r"\underline{96.9}" in text  # vMFProto J=3/5 Dis., ViT-B/14 (Table 1)


def test_the_format_choices_are_the_writers() -> None:
    assert set(FORMATS) == set(WRITERS)


def test_runtime_layout_shows_the_live_trunk_and_cached_epoch_times(capsys: pytest.CaptureFixture[str]) -> None:
    """tests/reports/fixtures/runs/runtime: NPPP 81.3 s with the trunk in the loop, 23.4 s from the
    cache, 189.0 img/s; vMFProto 214.6 s, 131.7 s, 73.0 img/s; the paper: 76.9 s / 206.8 s."""
    from benchmark.cli import main

    assert main(["report", str(RUNS), "--layout", "runtime"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("|"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "Method", "Epoch time (s)", "Epoch from cache (s)", "Inference (img/s)"]
    assert markdown_rows(out) == [["NPPP", "81.3", "23.4", "189.0"], ["vMFProto", "214.6", "131.7", "73.0"]]
    assert main(["report", str(RUNS), "--layout", "runtime", "--against", str(PAPER_CSV / "runtime.csv")]) == 0
    assert markdown_rows(capsys.readouterr().out) == [
        ["NPPP", "81.3 (76.9, +4.4)", "23.4 (–)", "189.0 (189.0, 0.0)"],
        ["vMFProto", "214.6 (206.8, +7.8)", "131.7 (–)", "73.0 (73.0, 0.0)"],
    ]


@pytest.mark.parametrize("options", [(), ("--decimals", "3"), ("--layout", "cub_main")])
def test_rendered_csv_reads_back_as_the_report_it_came_from(tmp_path, capsys, options) -> None:
    runs = str(RUNS / "cub_main")  # column groups per backbone, cells of 1 to 3 seeds
    table = tmp_path / "t.csv"
    assert report(runs, *options, "--format", "csv", "--out", str(table)) == 0
    capsys.readouterr()
    assert report(runs, *options) == 0
    expected = capsys.readouterr().out
    assert report(str(table), *options) == 0
    assert capsys.readouterr().out == expected
    assert "**" in expected and ("(n=" in expected or "†" in expected)  # marks and seeds travelled


def test_rendered_csv_without_one_seed_count_per_cell_is_not_read_back(tmp_path, capsys) -> None:
    write_run(tmp_path / "runs", "a", seed=0, metrics={"acc": 50.0, "con": 10.0})
    write_run(tmp_path / "runs", "b", seed=1, metrics={"acc": 52.0, "con": None})
    table = tmp_path / "t.csv"
    assert report(str(tmp_path / "runs"), "--format", "csv", "--out", str(table)) == 0
    assert "tidy." not in table.read_text(encoding="utf-8")  # acc over 2 seeds, con over 1
    with pytest.raises(ProtobenchError, match="reads back through its tidy. columns"):
        report(str(table))
