"""Spell a TableView as a caption paragraph and a GitHub-flavoured markdown table (tabulate).

Markdown has no column spans: a group header row names each group in its first column
and is followed by the metric row as the first table row; headings become bold or italic
rows; rules are dropped.
"""
from __future__ import annotations

from tabulate import tabulate

from benchmark.escaping import escape_pipes
from reports.compare import Reference
from reports.layout import Heading, Layout, Rule
from reports.marks import Mark, typeset_marks
from reports.table import CellView, HeaderCell, RowView, TableView, caption_text, interval_text

MISSING = "–"
DAGGER = "†"
MINUS = "−"
DAGGER_NOTE = (
    "† marks means over several seeds (after a row label: every value of the row); other entries are single runs."
)
COMPARE_NOTE = f"Each cell shows our value (published value, ours {MINUS} published)."
_MARKUP = {"best": "**{}**", "second": "<u>{}</u>", "tied": "{}≈", None: "{}"}
_ALIGN = {"l": "left", "c": "center"}
_HEADING = {"bold": "**{}**", "emph": "*{}*", "plain": "{}"}


def render_markdown(table: TableView) -> str:
    layout = table.layout
    header_rows = [_header_row(row) for row in table.header]
    lines: list[list[str]] = header_rows[1:]
    rows = [item for item in table.body if isinstance(item, RowView)]
    marks = dict(zip(map(id, rows), typeset_marks(layout, rows)))  # the cells LaTeX marks (reports.marks)
    for item in table.body:
        if isinstance(item, Heading):
            lines.append([_HEADING[item.style].format(item.text.markdown)] + [""] * (layout.n_columns - 1))
        elif not isinstance(item, Rule):
            lines.append(_row(layout, item, marks[id(item)], table.interval_note is not None))
    n_values = layout.n_columns - len(layout.label_align)
    align = [_ALIGN[a] for a in layout.label_align] + ["center"] * n_values
    grid = tabulate([[escape_pipes(c) for c in line] for line in lines], headers=[escape_pipes(c) for c in header_rows[0]],
                    tablefmt="github", colalign=align, disable_numparse=True)
    note = f"\n{table.interval_note}\n" if table.interval_note else ""
    return f"{_caption(table)}\n\n{grid}\n{note}"



def _caption(table: TableView) -> str:
    parts = [caption_text(table.layout.caption.markdown, table)]
    if table.has_dagger:
        parts.append(DAGGER_NOTE)
    if table.comparing:
        parts.append(COMPARE_NOTE)
    if table.significance_note:
        parts.append(table.significance_note)
    return " ".join(parts)


def _header_row(cells: tuple[HeaderCell, ...]) -> list[str]:
    out: list[str] = []
    for cell in cells:
        out.append(f"**{cell.text.markdown}**" if cell.bold and cell.text.md else cell.text.markdown)
        out.extend([""] * (cell.span - 1))
    return out


def _row(layout: Layout, row: RowView, marks: list[Mark], intervals: bool) -> list[str]:
    first = row.labels[0].markdown + (DAGGER if row.dagger else "") + (row.qualifier.markdown if row.qualifier else "")
    return [first, *(label.markdown for label in row.labels[1:])] + [
        _cell(layout, c, mark, intervals) for c, mark in zip(row.cells, marks)]


def _cell(layout: Layout, cell: CellView, mark: Mark, intervals: bool) -> str:
    if cell.value is None:
        shown = MISSING
    else:
        shown = cell.value if cell.std is None or not layout.show_std else f"{cell.value}±{cell.std}"
        shown = _MARKUP[mark].format(shown) + (DAGGER if cell.dagger else "")
        if layout.show_n and cell.n > 1:
            shown += f" (n={cell.n})"
        elif layout.show_n and not intervals and cell.stat is not None and cell.stat.deterministic:
            shown += " (deterministic)"  # seeds gave one result: n = 1 distinct result (reports.intervals)
        if intervals:
            shown += interval_text(cell)
    return shown if cell.reference is None else f"{shown} {_reference(cell.reference)}"


def _reference(ref: Reference) -> str:
    if ref.value is None:
        return f"({MISSING})"
    if ref.difference is None:
        return f"({ref.value})"
    return f"({ref.value}, {ref.difference.replace('-', MINUS)})"
