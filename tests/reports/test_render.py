"""Rendering: golden files for every layout, LaTeX structure, marks, daggers, comparison.

Regenerate the golden files after an intended change with
``PROTOBENCH_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/reports/test_render.py`` and review
the diff; ``test_hand_checked_cells`` pins values computed by hand from the fixture.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from benchmark.errors import ProtobenchError
from reports.layout import ColumnGroup, Layout, Row, text
from reports.layouts import CACHED_EPOCH_TIME, LAYOUTS, THROUGHPUT
from reports.load import load_csv, load_results
from reports.pivot import filter_frame, parse_where, pivot_layout
from reports.render import render_report
from reports_support import GOLDEN, PAPER_CSV, RUNS, check_latex, latex_rows, markdown_rows

UPDATE = os.environ.get("PROTOBENCH_UPDATE_GOLDEN") == "1"
SUFFIX = {"latex": "tex", "markdown": "md", "csv": "csv"}
# Layouts rendered next to the paper's numbers, with the CSV they compare against.
COMPARED = {
    "cub_main": "cub_main", "ablation": "ablation", "seed_robustness": "seed_robustness", "dogs_b": "dogs",
    "runtime": "runtime"}


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return load_results([RUNS])


def _golden(name: str, fmt: str, rendered: str) -> None:
    path = GOLDEN / f"{name}.{SUFFIX[fmt]}"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}; create it with PROTOBENCH_UPDATE_GOLDEN=1"
    assert rendered == path.read_text(encoding="utf-8"), f"{path} differs; review the change, then update"


@pytest.mark.parametrize("fmt", ["latex", "markdown"])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_golden(runs: pd.DataFrame, name: str, fmt: str) -> None:
    _golden(name, fmt, render_report(runs, name, fmt).text)


@pytest.mark.parametrize("fmt", ["latex", "markdown"])
@pytest.mark.parametrize("name", list(COMPARED))
def test_golden_against_paper(runs: pd.DataFrame, name: str, fmt: str) -> None:
    against = load_csv(PAPER_CSV / f"{COMPARED[name]}.csv")
    _golden(f"{name}_vs_paper", fmt, render_report(runs, name, fmt, against=against).text)


@pytest.mark.parametrize("fmt", ["latex", "markdown", "csv"])
def test_golden_pivot_of_the_cub_fixture(runs: pd.DataFrame, fmt: str) -> None:
    """``report RUNS --where dataset=cub`` (no layout); cells hand-checked in test_pivot.py."""
    cub = filter_frame(runs, parse_where(["dataset=cub"]))
    _golden("pivot_cub", fmt, render_report(cub, pivot_layout(cub), fmt).text)


@pytest.mark.parametrize("against", [False, True])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_latex_is_well_formed(runs: pd.DataFrame, name: str, against: bool) -> None:
    paper = load_csv(PAPER_CSV / f"{COMPARED.get(name, 'cub_main')}.csv") if against else None
    check_latex(render_report(runs, name, "latex", against=paper).text)


def _row(rows: list[list[str]], label: str) -> list[str]:
    matches = [r for r in rows if r[0] == label]
    assert len(matches) == 1, label
    return matches[0]


def test_hand_checked_cells(runs: pd.DataFrame) -> None:
    """cub_main cells worked out by hand from tests/reports/fixtures/runs."""
    md = markdown_rows(render_report(runs, "cub_main", "markdown").text)
    # vMFProto J=5 on B/14: seeds 0-2, Con. (77+78+79)/3 = 78.0 (best), Sta. 81.5 (NPPP J=7's 82.2 is best),
    # Dis. 96.8, Acc. 90.4 (second, tied with NPPP J=7's 90.44 -> 90.4). On S/14 one seed only: no dagger.
    assert _row(md, "vMFProto (J=5)")[1:9] == [
        "**78.0**†", "<u>81.5</u>†", "<u>96.8</u>†", "<u>90.4</u>†",
        "**79.8**", "**78.7**", "**96.1**", "**89.1**"]
    assert _row(md, "NPPP (J=7)")[1:5] == ["61.8", "**82.2**", "77.3", "<u>90.4</u>"]
    # Every present cell of NPPP J=5 averages two seeds: one dagger on the label. Acc. 91.0 is best.
    assert _row(md, "NPPP† (J=5)")[1:5] == ["58.5", "81.3", "81.1", "**91.0**"]
    # TesNet's Dis. 98.66 shows as 98.7 and ties vMFProto J=3's (98.8 + 98.6) / 2 = 98.7 for best: a tied
    # best is left plain, in markdown as in LaTeX (reports.marks.typeset_marks; issue 54).
    assert _row(md, "TesNet (J=3)")[3] == "98.7"
    assert _row(md, "vMFProto† (J=3)")[1:5] == ["<u>69.5</u>", "77.3", "98.7", "90.2"]
    # Null Dis. (TesNet, S/14) and absent Sta. (MGProto, B/16) are missing cells.
    assert _row(md, "TesNet (J=3)")[7] == "–" and _row(md, "MGProto (J=7)")[10] == "–"

    tex = latex_rows(render_report(runs, "cub_main", "latex").text)
    assert _row(tex, r"\textsc{vMFProto} (J=5)")[1:5] == [
        r"\textbf{78.0}$^\dagger$", r"\underline{81.5}$^\dagger$", r"\underline{96.8}$^\dagger$",
        r"\underline{90.4}$^\dagger$"]
    assert _row(tex, r"NPPP$^\dagger$ (J=5)")[4] == r"\textbf{91.0}"

    seeds = markdown_rows(render_report(runs, "seed_robustness", "markdown").text)
    # sample std (ddof=1) of 77, 78, 79 is 1.0; of 58, 59 is 0.707 -> 0.7.
    assert seeds[3][1] == "58.5±0.7" and seeds[7][1] == "78.0±1.0" and seeds[4][1] == "61.8"


def test_missing_cells_are_listed_in_table_order(runs: pd.DataFrame) -> None:
    report = render_report(runs, "cub_main", "markdown")
    assert "TesNet (J=3) | DINOv2 ViT-S/14 / Dis." in report.missing
    assert "MGProto (J=7) | DINOv3 ViT-B/16 / Sta." in report.missing
    assert "ProtoPNet (J=3) | DINOv2 ViT-B/14 / Con." not in report.missing
    assert report.missing[0] == "ProtoPNet (J=3) | DINOv2 ViT-S/14 / Con."
    seeds = render_report(runs, "seed_robustness", "markdown")
    assert seeds.missing[0] == "DINOv2 ViT-B/14 / NPPP / 3 | Con."
    assert render_report(runs, "runtime", "latex").missing == []


def test_decimals_change_display_and_ties(runs: pd.DataFrame) -> None:
    md = markdown_rows(render_report(runs, "cub_main", "markdown", decimals=2).text)
    # 90.44 vs 90.40: no longer tied; 98.66 vs 98.70: TesNet drops to second.
    assert _row(md, "NPPP (J=7)")[4] == "<u>90.44</u>" and _row(md, "vMFProto (J=5)")[4] == "90.40†"
    assert _row(md, "TesNet (J=3)")[3] == "<u>98.66</u>"
    zero = markdown_rows(render_report(runs, "runtime", "markdown", decimals=0).text)
    assert zero[0][1:] == ["81", "23", "189"]  # NPPP: 81.3 s live trunk, 23.4 s from cache, 189.0 img/s


def test_lower_is_better_marks_the_fastest_epoch(runs: pd.DataFrame) -> None:
    layout = Layout(
        name="speed", description="", caption=text("Speed."), tex_label="tab:speed", dataset="cub",
        filters={"backbone": "dinov2_vitb14", "J": 5, "variant": "default"},
        label_headers=(text("Method"),), label_align=("l",),
        columns=(ColumnGroup(None, {}, (CACHED_EPOCH_TIME, THROUGHPUT)),),
        body=(Row((text("NPPP"),), {"method": "nppp"}), Row((text("vMFProto"),), {"method": "vmfproto"})),
    )
    rows = markdown_rows(render_report(runs, layout, "markdown").text)
    assert rows == [["NPPP†", "**76.9**", "**189.0**"], ["vMFProto†", "<u>210.0</u>", "<u>73.0</u>"]]


def test_comparison_shows_published_value_and_signed_difference(runs: pd.DataFrame) -> None:
    against = load_csv(PAPER_CSV / "ablation.csv")
    md = markdown_rows(render_report(runs, "ablation", "markdown", against=against).text)
    assert md[0][1:] == [
        "78.0 (78.7, −0.7)", "81.5 (81.2, +0.3)", "96.8 (97.0, −0.2)", "90.4 (90.7, −0.3)"]
    assert _row(md, "L_CE only")[1] == "56.5 (56.5, 0.0)"
    assert _row(md, "L_CE + L_logdet")[1] == "– (65.1)"
    tex = latex_rows(render_report(runs, "ablation", "latex", against=against).text)
    assert tex[0][1:3] == ["78.0 (78.7, $-$0.7)", "81.5 (81.2, $+$0.3)"]
    unrelated = load_csv(PAPER_CSV / "runtime.csv")
    gating = markdown_rows(render_report(runs, "gating", "markdown", against=unrelated).text)
    assert gating[0][1] == "78.0 (–)"


def test_compare_against_published_means_with_std(runs: pd.DataFrame) -> None:
    against = load_csv(PAPER_CSV / "seed_robustness.csv")
    md = markdown_rows(render_report(runs, "seed_robustness", "markdown", against=against).text)
    assert md[7][1] == "78.0±1.0 (77.7, +0.3)"


def test_published_table_renders_with_no_missing_cell() -> None:
    for name, csv in {**COMPARED, "dogs": "dogs", "dogs_s": "dogs", "cars": "cars", "gating": "gating",
                      "offline_aug": "offline_aug", "expanded": "expanded", "runtime": "runtime"}.items():
        report = render_report(load_csv(PAPER_CSV / f"{csv}.csv"), name, "latex")
        # the paper times its epochs with the trunk in the loop only; our cached epoch is extra
        extra = [f"{row} | Epoch from cache (s)" for row in ("NPPP", "vMFProto")] if name == "runtime" else []
        assert report.missing == extra, name
        check_latex(report.text)


def _runs_csv(tmp_path: Path, body: str) -> pd.DataFrame:
    path = tmp_path / "runs.csv"
    path.write_text("dataset,backbone,method,J,variant,seed,n_seeds,acc\n" + body)
    return load_csv(path)


def test_duplicate_seed_in_a_cell_is_a_user_error(tmp_path: Path) -> None:
    frame = _runs_csv(tmp_path, "cars,dinov2_vitb14,nppp,5,default,0,1,90\ncars,dinov2_vitb14,nppp,5,default,0,1,91\n")
    with pytest.raises(ProtobenchError, match="nppp/J=5/default has two results for the same seed"):
        render_report(frame, "cars", "markdown")


def test_a_published_mean_cannot_be_averaged_with_runs(tmp_path: Path) -> None:
    frame = _runs_csv(tmp_path, "cars,dinov2_vitb14,nppp,5,default,,5,90\ncars,dinov2_vitb14,nppp,5,default,0,1,91\n")
    with pytest.raises(ProtobenchError, match="mean over seeds next to other rows"):
        render_report(frame, "cars", "markdown")


def test_seeds_with_a_missing_metric_average_the_rest(tmp_path: Path) -> None:
    lines = (f"cars,dinov2_vitb14,nppp,5,default,{seed},1,{acc}\n" for seed, acc in enumerate(["90", "", "92"]))
    frame = _runs_csv(tmp_path, "".join(lines))
    md = markdown_rows(render_report(frame, "cars", "markdown").text)
    assert _row(md, "NPPP† (J=5)")[1] == "91.0"  # the table's one row: the best of nothing, so not bold


def test_unknown_format_and_bad_decimals_are_user_errors(runs: pd.DataFrame) -> None:
    with pytest.raises(ProtobenchError, match="Unknown report format 'html'"):
        render_report(runs, "cub_main", "html")  # type: ignore[arg-type]
    with pytest.raises(ProtobenchError, match="decimals"):
        render_report(runs, "cub_main", "latex", decimals=-1)



def _md_mark(cell: str) -> str | None:
    return "best" if cell.startswith("**") else "second" if cell.startswith("<u>") else "tied" if "≈" in cell else None


def _tex_mark(cell: str) -> str | None:
    return ("best" if cell.startswith((r"\textbf{", r"{\boldmath")) else "second" if cell.startswith(r"\underline{")
            else "tied" if r"$^{\approx}$" in cell else None)


@pytest.mark.parametrize("name", ["cub_main", "explanations"])
def test_markdown_and_latex_mark_the_same_cells(runs: pd.DataFrame, name: str) -> None:
    """Issue 54: the same best (a tied best plain in both), second and ≈ cells in both formats."""
    md = [[_md_mark(c) for c in row] for row in markdown_rows(render_report(runs, name, "markdown").text)]
    tex = [[_tex_mark(c) for c in row] for row in latex_rows(render_report(runs, name, "latex").text)]
    md_marks = sorted(m for row in md for m in row if m)
    assert md_marks and "best" in md_marks and md_marks == sorted(m for row in tex for m in row if m)
