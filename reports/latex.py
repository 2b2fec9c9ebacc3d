"""Spell a TableView as a LaTeX float with a booktabs tabular, in the paper's style.

Needs ``\\usepackage{booktabs}`` (and ``graphicx`` for layouts that resize); the table's first
line, a comment above the float, says so. The generic table (``report`` without a layout) has
booktabs rules only, no vertical rule (booktabs' own guidance: they break its rules' spacing), its
column groups set apart by a ``\\cmidrule`` under their label; a paper layout keeps the paper's own vertical rules. A seed count
shared by every mean is stated once in the caption, not in each cell. Bold marks a unique best
only (tied best values are left plain), and with ``--significance`` the column's reference cell
(its best mean, which every ≈ is tested against) never carries ≈ itself.
"""
from __future__ import annotations

from collections.abc import Sequence

from reports.compare import Reference
from reports.layout import Heading, Layout, Rule
from reports.layouts import VMFPROTO
from reports.marks import typeset_marks
from reports.table import CLIPPED_MARK, CellView, HeaderCell, RowView, TableView, caption_text, interval_text

MISSING = "--"
# --method-macro: the paper defines \newcommand{\method}{\textsc{vMFProto}\xspace} (vmfproto.tex,
# preamble) and writes \method{} wherever vMFProto's label stands; "{}" ends the macro name.
METHOD_MACRO = r"\method{}"
DAGGER = r"$^\dagger$"
DAGGER_NOTE = (
    r"$\dagger$ marks means over several seeds (on a row label: every value of the row); "
    r"other entries are single runs."
)
COMPARE_NOTE = r"Each cell shows our value (published value, ours $-$ published)."
_MARKUP = {"best": r"\textbf{{{}}}", "second": r"\underline{{{}}}", "tied": r"{}$^{{\approx}}$", None: "{}"}
# mean±std is typeset in math, as in the paper: \textbf would not embolden it.
_HEADING = {"bold": r"\textbf{{{}}}", "emph": r"\emph{{{}}}", "plain": "{}"}
_MATH_MARKUP = {"best": r"{{\boldmath{}}}", "second": r"\underline{{{}}}", "tied": r"{}$^{{\approx}}$", None: "{}"}


def render_latex(table: TableView, *, method_macro: bool = False) -> str:
    """The table as a LaTeX float; ``method_macro``: vMFProto as the paper's ``\\method{}``."""
    layout = table.layout
    env = "table*" if layout.wide else "table"
    packages = "booktabs" + (", graphicx" if layout.resize else "")
    lines = [f"% needs \\usepackage{{{packages}}} in the preamble", f"\\begin{{{env}}}[t]", "  \\centering"]
    rows = [item for item in table.body if isinstance(item, RowView)]
    marks = typeset_marks(layout, rows)
    counts = {c.n for row in rows for c in row.cells if c.value is not None}
    n_once = layout.show_n and len(counts) == 1 and counts != {1}  # one n for every mean: said once
    if layout.tabcolsep is not None:
        lines.append(f"  \\setlength{{\\tabcolsep}}{{{layout.tabcolsep}}}")
    if layout.arraystretch is not None:
        lines.append(f"  \\renewcommand{{\\arraystretch}}{{{layout.arraystretch}}}")
    lines += [
        f"  \\caption{{{_caption(table, counts.copy().pop() if n_once else None)}}}",
        f"  \\label{{{layout.tex_label}}}",
    ]
    if layout.resize:
        lines.append("  \\resizebox{\\textwidth}{!}{%")
    lines.append(f"  \\begin{{tabular}}{{{column_spec(layout)}}}")
    lines.append("    \\toprule")
    for row in table.header:
        lines.append(f"    {_header_row(layout, row)}")
        if not layout.rule_between_groups and any(cell.span > 1 for cell in row):
            lines.append(f"    {_group_rules(row)}")
    lines.append("    \\midrule")
    for item in table.body:
        if isinstance(item, Rule):
            lines.append("    \\midrule")
        elif isinstance(item, Heading):
            lines.append(f"    \\multicolumn{{{layout.n_columns}}}{{{item.align}}}{{{_styled(item)}}} \\\\")
        else:
            lines.append(f"    {_row(layout, item, table.interval_note is not None, marks[rows.index(item)], n_once)}")
    lines.append("    \\bottomrule")
    lines.append("  \\end{tabular}")
    if layout.resize:
        lines.append("  }%")
    lines.append(f"\\end{{{env}}}")
    text = "\n".join(lines) + "\n"
    return text.replace(VMFPROTO.tex, METHOD_MACRO) if method_macro else text


def column_spec(layout: Layout) -> str:
    """``l|cccc|cccc``: label columns, then one ``c`` per metric, with the layout's vertical rules
    (the paper's tables; the generic table has none)."""
    bar = "|" if layout.rule_after_labels else ""
    labels = "".join(align + bar for align in layout.label_align)
    groups = ("|" if layout.rule_between_groups else "").join("c" * len(g.metrics) for g in layout.columns)
    return labels + groups


def _group_rules(cells: tuple[HeaderCell, ...]) -> str:
    """``\\cmidrule(lr){3-6} \\cmidrule(lr){7-10}``: a rule under each header cell spanning columns."""
    rules, first = [], 1
    for cell in cells:
        if cell.span > 1 and cell.text.tex.strip():
            rules.append(f"\\cmidrule(lr){{{first}-{first + cell.span - 1}}}")
        first += cell.span
    return " ".join(rules)


def _caption(table: TableView, n: int | None = None) -> str:
    parts = [caption_text(table.layout.caption.tex, table)]
    if n is not None:
        parts.append(f"Every mean is over $n={n}$ seeds.")
    if table.has_dagger:
        parts.append(DAGGER_NOTE)
    if table.comparing:
        parts.append(COMPARE_NOTE)
    if table.significance_note:
        parts.append(table.significance_note.replace("≈", r"$\approx$").replace("α", r"$\alpha$"))
    if table.interval_note:
        parts.append(table.interval_note.replace("%", r"\%").replace(CLIPPED_MARK, r"\ddag{}"))
    return " ".join(parts)


def _header_row(layout: Layout, cells: tuple[HeaderCell, ...]) -> str:
    out = []
    for i, cell in enumerate(cells):
        content = f"\\textbf{{{cell.text.tex}}}" if cell.bold else cell.text.tex
        if cell.span > 1:
            last = i == len(cells) - 1
            align = "c|" if layout.rule_between_groups and not last else "c"
            content = f"\\multicolumn{{{cell.span}}}{{{align}}}{{{content}}}"
        out.append(content)
    return " & ".join(out) + " \\\\"


def _styled(heading: Heading) -> str:
    return _HEADING[heading.style].format(heading.text.tex)


def _row(layout: Layout, row: RowView, intervals: bool, marks: Sequence[str | None], n_once: bool) -> str:
    first = row.labels[0].tex + (DAGGER if row.dagger else "") + (row.qualifier.tex if row.qualifier else "")
    labels = [first, *(label.tex for label in row.labels[1:])]
    cells = [_cell(layout, c, intervals, mark, n_once) for c, mark in zip(row.cells, marks)]
    return " & ".join(labels + cells) + " \\\\"


def _cell(layout: Layout, cell: CellView, intervals: bool, mark: str | None, n_once: bool) -> str:
    if cell.value is None:
        shown = MISSING
    elif cell.std is None or not layout.show_std:
        shown = _MARKUP[mark].format(cell.value)
    else:
        shown = _MATH_MARKUP[mark].format(f"${cell.value}{{\\pm}}{cell.std}$")
    if cell.dagger:
        shown += DAGGER
    if layout.show_n and cell.n > 1 and not n_once:
        shown += f" (n={cell.n})"
    if intervals and cell.value is not None:
        shown += interval_text(cell, r"\ddag{}")
    return shown if cell.reference is None else f"{shown} {_reference(cell.reference)}"


def _reference(ref: Reference) -> str:
    if ref.value is None:
        return f"({MISSING})"
    if ref.difference is None:
        return f"({ref.value})"
    return f"({ref.value}, {_signed(ref.difference)})"


def _signed(difference: str) -> str:
    return f"${difference[0]}${difference[1:]}" if difference[0] in "+-" else difference
