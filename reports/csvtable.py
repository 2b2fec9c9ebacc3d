"""Spell a TableView as CSV: one line per row, a value, std and n column per table column
(with ``report --ci`` also ci_low, ci_high, ci_clipped and ci_method: the one interval policy of
``reports.intervals``).

For spreadsheets: no marks, no daggers; the std and n columns are filled wherever known,
whether or not the LaTeX/markdown version of the layout prints them. Row labels are the
table's (with the qualifier, ``ProtoPNet (J=3)``); a layout with headings gets a first
``section`` column naming them (``DINOv2 ViT-B/14 / NPPP``).

The display columns are followed by ``tidy.[<g>.]<column>`` columns, per column group g: the
cell's key, ``n_seeds`` and each metric's unrounded mean and std, which ``reports.load.load_csv``
reads back as published aggregates, so ``report table.csv`` prints the cells of the report that
wrote it (not written where a cell's metrics differ in their number of seeds).
"""
from __future__ import annotations

from benchmark.csv_cells import csv_text
from reports.columns import KEY_COLUMNS, TIDY_PREFIX, std_column
from reports.layout import Heading
from reports.table import CellView, RowView, TableView, column_name


def render_csv(table: TableView) -> str:
    layout = table.layout
    sectioned = any(isinstance(item, Heading) for item in table.body)
    names = [column_name(group, metric) for group in layout.columns for metric in group.metrics]
    header = (["section"] if sectioned else []) + [h.md or "row" for h in layout.label_headers]
    intervals = table.interval_note is not None
    suffixes = ("", " std", " n") + ((" ci_low", " ci_high", " ci_clipped", " ci_method") if intervals else ())
    header += [f"{name}{suffix}" for name in names for suffix in suffixes]
    tidy_header, tidy_lines = _tidy_cells(table) or ([], [])
    header += tidy_header
    tidy_rows = iter(tidy_lines)
    lines: list[list[str]] = []
    context: list[str] = []
    for item in table.body:
        if isinstance(item, Heading):
            context[item.level :] = [item.text.md]
        elif isinstance(item, RowView):
            labels = _label_cells(item)
            values = [v for c in item.cells for v in (c.value or "", c.std or "", c.n or "")
                      + (_interval_cells(c) if intervals else ())]
            lines.append(([" / ".join(context)] if sectioned else []) + labels + values + next(tidy_rows, []))
    return csv_text(header, lines)  # no formula cell (a hostile display name or label)


def _interval_cells(cell: CellView) -> tuple[str, ...]:
    """``ci_low, ci_high, ci_clipped, ci_method`` of one cell (``reports.intervals``' one policy;
    the bounds empty where it has no interval; clipped: ``true`` where clipped to the metric's
    range; the method with its n, or why there is none)."""
    stat = cell.stat
    clipped = "" if cell.ci is None else str(stat is not None and stat.ci_clipped).lower()
    return (*(cell.ci or ("", "")), clipped, "" if stat is None or stat.ci_note is None else stat.ci_note)


def _label_cells(row: RowView) -> list[str]:
    """The row's label cells as plain text, the qualifier after the first."""
    first = row.labels[0].md + (row.qualifier.md if row.qualifier else "")
    return [first, *(label.md for label in row.labels[1:])]


def _tidy_cells(table: TableView) -> tuple[list[str], list[list[str]]] | None:
    """The ``tidy.`` header and one line per body row: per column group (``tidy.<g>.`` when there
    are several, numbered from 1) the cell's key, ``n_seeds`` and each metric's unrounded mean and
    std; a group's cells stay empty where the row has no value there. None when a cell's metrics
    differ in their number of seeds: the tidy schema has one ``n_seeds`` per cell."""
    layout = table.layout
    prefixes = [TIDY_PREFIX] if len(layout.columns) == 1 else [
        f"{TIDY_PREFIX}{g}." for g in range(1, len(layout.columns) + 1)]
    header = [prefix + column for prefix, group in zip(prefixes, layout.columns)
              for column in (*KEY_COLUMNS, "n_seeds", *(c for m in group.metrics for c in (m.key, std_column(m.key))))]
    views = [item for item in table.body if isinstance(item, RowView)]
    lines = []
    for row, view in zip(layout.rows, views):
        cells = iter(view.cells)
        line: list[str] = []
        for group in layout.columns:
            stats = [next(cells).stat for _ in group.metrics]
            seeds = {stat.n for stat in stats if stat is not None}
            if len(seeds) > 1:
                return None
            key = [str(v) for v in layout.cell_key(row, group)] if seeds else [""] * len(KEY_COLUMNS)
            line += [*key, str(seeds.pop()) if seeds else "",
                     *(_number(v) for s in stats for v in ((s.mean, s.std) if s else (None, None)))]
        lines.append(line)
    return header, lines


def _number(value: float | None) -> str:
    """A float as the shortest text that reads back to the same float (``repr``)."""
    return "" if value is None else repr(value)
