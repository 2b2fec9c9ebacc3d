"""``protobench report`` without --layout: any grid pivoted, --rows/--cols/--metrics/--where,
mean ± std with n, marks, markdown/LaTeX/CSV; paper layouts say which results they leave out."""
from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from reports.load import load_results
from reports.pivot import filter_frame, parse_where, pivot_layout
from reports.render import render_report
from reports_support import RUNS, check_latex, markdown_rows, write_run

CUSTOM = "example_adapter:CosinePrototypes"


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    """vMFProto J=3 (3 seeds) and J=5 (1 seed), NPPP J=3, a custom method; two backbones."""
    root = tmp_path / "runs"
    for seed, (acc, con) in enumerate([(80.0, 60.0), (82.0, 64.0), (84.0, 62.0)]):
        write_run(root, f"v3s{seed}", J=3, seed=seed, metrics={"acc": acc, "con": con})
    write_run(root, "v5", J=5, metrics={"acc": 79.0, "con": 70.0})
    write_run(root, "n3", method="nppp", J=3, metrics={"acc": 81.0, "con": 40.0})
    write_run(root, "c3", method=CUSTOM, J=3, metrics={"acc": 75.0, "con": 20.0},
              method_display_name="Cosine prototypes")
    write_run(root, "v3b", J=3, backbone="dinov2_vitb14", metrics={"acc": 88.0, "con": 66.0})
    return root


def rows_by_label(text: str) -> dict[tuple[str, ...], list[str]]:
    """Body rows by (method, J); the first table row is the metric header under the group row."""
    return {tuple(cells[:2]): cells[2:] for cells in markdown_rows(text)[1:]}


def test_default_pivot_rows_method_and_J_columns_backbone(grid: Path) -> None:
    frame = load_results([grid])
    text = render_report(frame, pivot_layout(frame), "markdown").text
    # dataset and variant take one value: named in the caption, not as rows or columns
    assert "All rows: Dataset synthbirds, Variant default." in text
    header = [line for line in text.splitlines() if line.startswith("|")][:3]
    assert "DINOv2 ViT-S/14" in header[0] and "DINOv2 ViT-B/14" in header[0]
    assert [c.strip() for c in header[2].strip("|").split("|")] == ["Method", "J", "Con.", "Acc.", "Con.", "Acc."]
    rows = rows_by_label(text)
    # paper order of methods, then other methods by name; J ascending
    assert list(rows) == [("NPPP", "3"), ("vMFProto", "3"), ("vMFProto", "5"), ("Cosine prototypes", "3")]
    con_std = statistics.stdev([60.0, 64.0, 62.0])  # 2.0: the oracle is the standard library
    acc_std = statistics.stdev([80.0, 82.0, 84.0])
    # B/14 columns first (the paper's backbone order); a column's only value is its best
    assert rows[("vMFProto", "3")] == [
        "**66.0**", "**88.0**", f"<u>62.0±{con_std:.1f}</u> (n=3)", f"**82.0±{acc_std:.1f}** (n=3)"]
    assert rows[("vMFProto", "5")][2:] == ["**70.0**", "79.0"]
    assert rows[("NPPP", "3")][2:] == ["40.0", "<u>81.0</u>"]
    assert rows[("Cosine prototypes", "3")][2:] == ["20.0", "75.0"]


def test_rows_cols_metrics_and_where_reshape_the_table(grid: Path) -> None:
    frame = filter_frame(load_results([grid]), parse_where(["J=3", "method=vmfproto,nppp"]))
    layout = pivot_layout(frame, rows=["backbone"], cols=["method"], metrics=["acc"])
    text = render_report(frame, layout, "markdown").text
    header = [c.strip() for c in text.splitlines()[2].strip("|").split("|")]
    assert header == ["Backbone", "NPPP", "vMFProto"]  # paper order: NPPP before vMFProto
    # one mark per column: NPPP has a single value (best); vMFProto: 88.0 best, 82.0 second
    assert markdown_rows(text) == [["DINOv2 ViT-B/14", "–", "**88.0**"],
                                   ["DINOv2 ViT-S/14", "**81.0**", "<u>82.0±2.0</u> (n=3)"]]


def test_a_dimension_neither_shown_nor_fixed_is_an_error(grid: Path) -> None:
    frame = load_results([grid])
    with pytest.raises(ProtobenchError, match=r"backbone takes 2 values .* --where backbone="):
        pivot_layout(frame, rows=["method", "J"], cols=["dataset"])
    with pytest.raises(ProtobenchError, match="not a table dimension"):
        pivot_layout(frame, rows=["seed"])
    with pytest.raises(ProtobenchError, match="in both --rows and --cols"):
        pivot_layout(frame, rows=["method"], cols=["method"])
    with pytest.raises(ProtobenchError, match="--metrics nope: unknown"):
        pivot_layout(frame, metrics=["nope"])


def test_where_mistakes_are_one_clear_error(grid: Path) -> None:
    with pytest.raises(ProtobenchError, match="not KEY=VALUE"):
        parse_where(["method"])
    with pytest.raises(ProtobenchError, match="unknown key 'lr'"):
        parse_where(["lr=3"])
    with pytest.raises(ProtobenchError, match="No result matches --where J=9; the results have J: 3, 5"):
        filter_frame(load_results([grid]), parse_where(["J=9"]))


def test_latex_pivot_is_well_formed_and_escapes_labels(grid: Path) -> None:
    frame = load_results([grid])
    tex = render_report(frame, pivot_layout(frame), "latex").text
    check_latex(tex)
    assert r"\underline{$62.0{\pm}2.0$} (n=3)" in tex and r"\textsc{vMFProto}" in tex and "Cosine prototypes" in tex


def test_csv_pivot_has_value_std_and_n_columns(grid: Path) -> None:
    frame = load_results([grid])
    rows = list(csv.DictReader(io.StringIO(render_report(frame, pivot_layout(frame), "csv").text)))
    vmf3 = next(r for r in rows if r["Method"] == "vMFProto" and r["J"] == "3")
    assert vmf3["DINOv2 ViT-S/14 / Acc."] == "82.0"
    assert vmf3["DINOv2 ViT-S/14 / Acc. std"] == f"{statistics.stdev([80.0, 82.0, 84.0]):.1f}"
    assert vmf3["DINOv2 ViT-S/14 / Acc. n"] == "3"
    assert vmf3["DINOv2 ViT-B/14 / Acc. n"] == "1"


def test_a_result_without_a_recorded_display_name_shows_its_class_name(tmp_path: Path) -> None:
    path = write_run(tmp_path, "a", method=CUSTOM)
    frame = load_results([tmp_path])
    rows = markdown_rows(render_report(frame, pivot_layout(frame), "markdown").text)
    assert rows == [["Cosine prototypes", "50.0"]]  # the display name the result recorded (one row: no bold)
    data = json.loads(path.read_text())  # a result written before results recorded it: its class name
    del data["method_display_name"]
    path.write_text(json.dumps(data))
    frame = load_results([tmp_path])
    rows = markdown_rows(render_report(frame, pivot_layout(frame), "markdown").text)
    assert rows == [["CosinePrototypes", "50.0"]]


def test_cli_report_without_layout(grid: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(grid), "--check-adapters", "--where", "backbone=dinov2_vits14", "--metrics", "acc",
                 "--rows", "method", "--cols", "J"]) == 0
    out, err = capsys.readouterr()
    assert markdown_rows(out) == [["NPPP", "<u>81.0</u>", "–"], ["vMFProto", "**82.0±2.0** (n=3)", "**79.0**"],
                                  ["Cosine prototypes", "75.0", "–"]]
    assert err == "2 cell(s) of the table have no result (shown as –/--).\n"
    assert main(["report", str(grid), "--layout", "cub_main", "--rows", "method"]) == 2
    assert "--rows shape the table of every result" in capsys.readouterr().err


def test_paper_layout_says_which_results_it_leaves_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for seed in range(4):
        write_run(tmp_path, f"s{seed}", seed=seed)
    assert main(["report", str(tmp_path), "--layout", "cub_main"]) == 1  # no cell filled: not a success
    last = capsys.readouterr().err.splitlines()[0]  # first: the suggestion
    assert last == ("cub_main: 4 results not in this layout (dataset synthbirds ≠ cub) — "
                    "try `protobench report RUNS` without --layout")


def test_left_out_reasons_count_each_kind(capsys: pytest.CaptureFixture[str]) -> None:
    """gating shows cub / ViT-B/14 / vMFProto / J=5 with four variants; count the others from the JSON."""
    shown_variants = {"default", "gating_pca", "gating_attention", "gating_none"}
    specs = [json.loads(p.read_text())["spec"] for p in RUNS.rglob("result.json")]
    inside = [s for s in specs if (s["dataset"], s["backbone"], s["method"], s["prototypes_per_class"]) ==
              ("cub", "dinov2_vitb14", "vmfproto", 5) and s["variant"] in shown_variants]
    not_cub = [s for s in specs if s["dataset"] != "cub"]
    assert main(["report", str(RUNS), "--layout", "gating"]) == 0
    last = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("gating: "))
    assert last.startswith(f"gating: {len(specs) - len(inside)} results not in this layout (")
    datasets = ", ".join(sorted({s["dataset"] for s in not_cub}))
    assert f"{len(not_cub)}× dataset {datasets} ≠ cub" in last and last.endswith("without --layout")


def test_metrics_beyond_the_paper_have_their_directions_and_digits(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    write_run(root, "a", J=3, metrics={"acc": 80.0, "purity": 40.0, "size_local": 2.25, "size_global": 6.0,
                                       "del": 12.5})
    write_run(root, "b", J=5, metrics={"acc": 81.0, "purity": 50.0, "size_local": 3.5, "size_global": 10.0,
                                       "del": 2.5})
    frame = load_results([root])
    layout = pivot_layout(frame, metrics=["purity", "size_local", "size_global", "del"])
    # higher purity/del is better; smaller sizes are better; size_global is a count (0 digits)
    assert markdown_rows(render_report(frame, layout, "markdown").text) == [
        ["vMFProto", "3", "<u>40.0</u>", "**2.2**", "**6**", "**12.5**"],
        ["vMFProto", "5", "**50.0**", "<u>3.5</u>", "<u>10</u>", "<u>2.5</u>"],
    ]
