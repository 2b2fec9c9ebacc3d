"""The published numbers (reports/paper/*.csv) regenerate the paper's tables and marks.

The expected bold/underlined cells are written out by hand from the paper's LaTeX; a
second test compares the whole tabular with source (``PAPER_TEX``) when it lies beside the checkout.
"""
from __future__ import annotations

import re

import pytest

from reports.load import load_csv
from reports.render import render_report
from reports_support import PAPER_CSV, PAPER_TEX, latex_rows, markdown_rows

B14, S14, B16, S16 = "B/14", "S/14", "B/16", "S/16"
BACKBONES = (B14, S14, B16, S16)
METRICS = ("Con.", "Sta.", "Dis.", "Acc.")

# (row, backbone, metric) -> mark, read off tab:cub_main.
CUB_MAIN_MARKS = {
    ("vMFProto (J=5)", B14, "Con."): "best", ("vMFProto (J=7)", B14, "Con."): "second",
    ("vMFProto (J=7)", B14, "Sta."): "best", ("NPPP (J=7)", B14, "Sta."): "second",
    ("vMFProto (J=3)", B14, "Dis."): "best", ("vMFProto (J=5)", B14, "Dis."): "second",
    ("NPPP (J=7)", B14, "Acc."): "best", ("NPPP (J=5)", B14, "Acc."): "second",
    ("vMFProto (J=5)", S14, "Con."): "best", ("vMFProto (J=7)", S14, "Con."): "second",
    ("NPPP (J=7)", S14, "Sta."): "best", ("NPPP (J=5)", S14, "Sta."): "second",
    ("vMFProto (J=3)", S14, "Dis."): "best", ("vMFProto (J=5)", S14, "Dis."): "second",
    ("vMFProto (J=7)", S14, "Acc."): "best", ("vMFProto (J=5)", S14, "Acc."): "second",
    ("vMFProto (J=5)", B16, "Con."): "best", ("vMFProto (J=7)", B16, "Con."): "second",
    ("NPPP (J=5)", B16, "Sta."): "best", ("NPPP (J=3)", B16, "Sta."): "second",
    ("vMFProto (J=3)", B16, "Dis."): "best", ("vMFProto (J=5)", B16, "Dis."): "second",
    ("vMFProto (J=5)", B16, "Acc."): "best", ("vMFProto (J=7)", B16, "Acc."): "second",
    ("EvalProtoPNet (J=3)", S16, "Con."): "best", ("vMFProto (J=5)", S16, "Con."): "second",
    ("NPPP (J=3)", S16, "Sta."): "best", ("NPPP (J=5)", S16, "Sta."): "second",
    ("vMFProto (J=3)", S16, "Dis."): "best", ("vMFProto (J=5)", S16, "Dis."): "second",
    ("vMFProto (J=5)", S16, "Acc."): "best", ("vMFProto (J=7)", S16, "Acc."): "second",
}

# (row, backbone) -> mark, read off tab:dogs_main_b and tab:dogs_main_s (Acc. only).
DOGS_MARKS = {
    ("vMFProto (J=5)", B14): "best", ("NPPP (J=5)", B14): "second",
    ("vMFProto (J=3)", S14): "best", ("vMFProto (J=5)", S14): "second",
    ("vMFProto (J=3)", B16): "best", ("vMFProto (J=7)", B16): "second",
    ("vMFProto (J=3)", S16): "best", ("vMFProto (J=5)", S16): "second",
}

# (row, backbone) -> mark, read off tab:cars_main.
CARS_MARKS = {
    ("vMFProto (J=7)", B14): "best", ("vMFProto (J=5)", B14): "second",
    ("Def. ProtoPNet (J=7)", S14): "best", ("vMFProto (J=3)", S14): "second",
    ("vMFProto (J=3)", B16): "best", ("vMFProto (J=5)", B16): "second",
    ("TesNet (J=7)", S16): "best", ("TesNet (J=5)", S16): "second",
}

_LATEX_MARK = {r"\textbf": "best", r"\underline": "second"}


def _latex_marks(name: str, csv: str) -> dict[tuple[str, int], str]:
    rows = latex_rows(render_report(load_csv(PAPER_CSV / f"{csv}.csv"), name, "latex").text)
    marks = {}
    for cells in rows:
        label = re.sub(r"\\textsc\{(.*?)\}|\$\^\\dagger\$", r"\1", cells[0])
        for column, cell in enumerate(cells[1:]):
            for command, mark in _LATEX_MARK.items():
                if cell.startswith(command + "{"):
                    marks[(label, column)] = mark
    return marks


def _markdown_marks(name: str, csv: str) -> dict[tuple[str, int], str]:
    rows = markdown_rows(render_report(load_csv(PAPER_CSV / f"{csv}.csv"), name, "markdown").text)
    marks = {}
    for cells in rows:
        label = cells[0].replace("†", "")
        for column, cell in enumerate(cells[1:]):
            if cell.startswith("**"):
                marks[(label, column)] = "best"
            elif cell.startswith("<u>"):
                marks[(label, column)] = "second"
    return marks


@pytest.mark.parametrize("marks_of", [_latex_marks, _markdown_marks])
def test_cub_main_marks_the_papers_cells(marks_of) -> None:
    columns = [(b, m) for b in BACKBONES for m in METRICS]
    expected = {(row, columns.index((b, m))): mark for (row, b, m), mark in CUB_MAIN_MARKS.items()}
    assert marks_of("cub_main", "cub_main") == expected


@pytest.mark.parametrize("marks_of", [_latex_marks, _markdown_marks])
@pytest.mark.parametrize(("name", "expected"), [("dogs", DOGS_MARKS), ("cars", CARS_MARKS)])
def test_accuracy_tables_mark_the_papers_cells(marks_of, name: str, expected: dict) -> None:
    assert marks_of(name, name) == {(row, BACKBONES.index(b)): mark for (row, b), mark in expected.items()}


def test_split_dogs_tables_keep_the_marks_of_their_columns() -> None:
    b_side = {(row, [B14, B16].index(b)): m for (row, b), m in DOGS_MARKS.items() if b in (B14, B16)}
    s_side = {(row, [S14, S16].index(b)): m for (row, b), m in DOGS_MARKS.items() if b in (S14, S16)}
    assert _latex_marks("dogs_b", "dogs") == b_side
    assert _latex_marks("dogs_s", "dogs") == s_side


def test_cub_main_daggers_are_the_five_seed_rows() -> None:
    rows = markdown_rows(render_report(load_csv(PAPER_CSV / "cub_main.csv"), "cub_main", "markdown").text)
    daggered = [cells[0] for cells in rows if "†" in cells[0]]
    assert daggered == [f"{m}† (J={j})" for m in ("NPPP", "vMFProto") for j in (3, 5, 7)]
    assert not any("†" in cell for cells in rows for cell in cells[1:])


PAPER_TABLES = [
    ("cub_main", "cub_main", "tab:cub_main"),
    ("dogs_b", "dogs", "tab:dogs_main_b"),
    ("dogs_s", "dogs", "tab:dogs_main_s"),
    ("cars", "cars", "tab:cars_main"),
    ("seed_robustness", "seed_robustness", "tab:supp_seed_robustness"),
    ("ablation", "ablation", "tab:cub_ablation"),
    ("gating", "gating", "tab:fg_ablation_supp"),
    ("offline_aug", "offline_aug", "tab:offline_aug_all_supp"),
    ("expanded", "expanded", "tab:expanded_backbone_ablation_supp"),
]


def _tabular(lines: list[str], anchor: int, *, expand_macro: bool = True) -> list[str]:
    """The tabular nearest the ``\\label`` at line ``anchor`` (before or after it), normalised;
    ``expand_macro``: the paper's ``\\method{}`` spelt out as ``\\textsc{vMFProto}``."""
    spans = [
        (begin, next(i for i in range(begin, len(lines)) if "\\end{tabular}" in lines[i]))
        for begin, line in enumerate(lines)
        if "\\begin{tabular}" in line
    ]
    begin, end = min(spans, key=lambda span: span[0] - anchor if span[0] >= anchor else anchor - span[1])
    out: list[str] = []
    for line in lines[begin : end + 1]:
        line = re.sub(r"\s+", " ", line.strip())
        line = line.replace(r"\method{}", r"\textsc{vMFProto}") if expand_macro else line
        if not (line == r"\midrule" and out and out[-1] == r"\midrule"):  # dogs_b doubles its rules
            out.append(line)
    return out


@pytest.mark.skipif(not PAPER_TEX.is_file(), reason="the paper's source is not beside the checkout")
@pytest.mark.parametrize(("name", "csv", "label"), PAPER_TABLES)
def test_published_numbers_regenerate_the_papers_tabular(name: str, csv: str, label: str) -> None:
    paper = PAPER_TEX.read_text(encoding="utf-8").splitlines()
    anchor = next(i for i, line in enumerate(paper) if f"\\label{{{label}}}" in line)
    ours = render_report(load_csv(PAPER_CSV / f"{csv}.csv"), name, "latex").text.splitlines()
    assert _tabular(ours, 0) == _tabular(paper, anchor)


def _float_setup(lines: list[str], anchor: int) -> dict[str, str]:
    """``\\tabcolsep`` and ``\\arraystretch`` set between the float's start and its tabular."""
    begin = max(i for i, line in enumerate(lines[: anchor + 1]) if re.search(r"\\begin\{(table|figure|minipage)", line))
    setup: dict[str, str] = {}
    for line in lines[begin:]:
        if "\\begin{tabular}" in line:
            break
        for name, pattern in (("tabcolsep", r"\\setlength\{\\tabcolsep\}\{([^}]*)\}"),
                              ("arraystretch", r"\\renewcommand\{\\arraystretch\}\{([^}]*)\}")):
            if match := re.search(pattern, line):
                setup[name] = match.group(1)
    return setup


@pytest.mark.skipif(not PAPER_TEX.is_file(), reason="the paper's source is not beside the checkout")
@pytest.mark.parametrize(("name", "csv", "label"), PAPER_TABLES)
def test_each_float_sets_the_papers_column_gap_and_row_stretch(name: str, csv: str, label: str) -> None:
    paper = PAPER_TEX.read_text(encoding="utf-8").splitlines()
    anchor = next(i for i, line in enumerate(paper) if f"\\label{{{label}}}" in line)
    ours = render_report(load_csv(PAPER_CSV / f"{csv}.csv"), name, "latex").text.splitlines()
    assert ours[0].startswith("% needs \\usepackage{booktabs")  # the table's first line says what it needs
    assert _float_setup(ours, 1) == _float_setup(paper, anchor)


def test_table_1_is_set_as_in_the_paper() -> None:
    """Written out from vmfproto.tex, Table 1: \\tabcolsep 1.8pt, \\arraystretch 1.04, before the caption."""
    lines = render_report(load_csv(PAPER_CSV / "cub_main.csv"), "cub_main", "latex").text.splitlines()
    assert lines[:5] == [r"% needs \usepackage{booktabs, graphicx} in the preamble", r"\begin{table*}[t]", r"  \centering", r"  \setlength{\tabcolsep}{1.8pt}",
                         r"  \renewcommand{\arraystretch}{1.04}"]


@pytest.mark.skipif(not PAPER_TEX.is_file(), reason="the paper's source is not beside the checkout")
def test_method_macro_gives_the_papers_table_1_rows_verbatim() -> None:
    """With --method-macro the tabular equals the paper's without mapping \\method{} back."""
    paper = PAPER_TEX.read_text(encoding="utf-8").splitlines()
    anchor = next(i for i, line in enumerate(paper) if "\\label{tab:cub_main}" in line)
    text = render_report(load_csv(PAPER_CSV / "cub_main.csv"), "cub_main", "latex", method_macro=True).text
    assert r"\textsc{vMFProto}" not in text and text.count(r"\method{}$^\dagger$ (J=") == 3
    assert _tabular(text.splitlines(), 0, expand_macro=False) == _tabular(paper, anchor, expand_macro=False)


@pytest.mark.skipif(not PAPER_TEX.is_file(), reason="the paper's source is not beside the checkout")
def test_published_runtime_regenerates_the_papers_tabular_next_to_the_cached_epoch() -> None:
    """tab:supp_runtime, with our extra "Epoch from cache" column (third) empty for the paper:
    without that column, the tabular is the paper's."""
    paper = PAPER_TEX.read_text(encoding="utf-8").splitlines()
    anchor = next(i for i, line in enumerate(paper) if "\\label{tab:supp_runtime}" in line)
    ours = render_report(load_csv(PAPER_CSV / "runtime.csv"), "runtime", "latex").text.splitlines()
    rows = [line for line in _tabular(ours, 0) if " & " in line]
    assert [row.split(" & ")[2] for row in rows] == ["Epoch from cache (s)", "--", "--"]
    without_cache = [" & ".join(cells[:2] + cells[3:]) for cells in (row.split(" & ") for row in rows)]
    assert without_cache == [line for line in _tabular(paper, anchor) if " & " in line]
