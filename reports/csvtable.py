"""Spell a TableView as CSV: one line per row, a value, std and n column per table column
(with ``report --ci`` also ci_low, ci_high over seeds and img_ci_low, img_ci_high over test images).

For spreadsheets: no marks, no daggers; the std and n columns are filled wherever known,
whether or not the LaTeX/markdown version of the layout prints them. Row labels are the
table's (with the qualifier, ``ProtoPNet (J=3)``); a layout with headings gets a first
``section`` column naming them (``DINOv2 ViT-B/14 / NPPP``).
"""
from __future__ import annotations

import csv
import io

from reports.layout import Heading
from reports.table import RowView, TableView, column_name


def render_csv(table: TableView) -> str:
    layout = table.layout
    sectioned = any(isinstance(item, Heading) for item in table.body)
    names = [column_name(group, metric) for group in layout.columns for metric in group.metrics]
    header = (["section"] if sectioned else []) + [h.md or "row" for h in layout.label_headers]
    intervals = table.interval_note is not None
    suffixes = ("", " std", " n") + ((" ci_low", " ci_high", " img_ci_low", " img_ci_high") if intervals else ())
    header += [f"{name}{suffix}" for name in names for suffix in suffixes]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    context: list[str] = []
    for item in table.body:
        if isinstance(item, Heading):
            context[item.level :] = [item.text.md]
        elif isinstance(item, RowView):
            labels = _label_cells(item)
            values = [v for c in item.cells for v in (c.value or "", c.std or "", c.n or "")
                      + ((*(c.ci or ("", "")), *(c.image_ci or ("", ""))) if intervals else ())]
            writer.writerow(([" / ".join(context)] if sectioned else []) + labels + values)
    return out.getvalue()


def _label_cells(row: RowView) -> list[str]:
    """The row's label cells as plain text, the qualifier after the first."""
    first = row.labels[0].md + (row.qualifier.md if row.qualifier else "")
    return [first, *(label.md for label in row.labels[1:])]
