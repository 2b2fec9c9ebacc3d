"""The overview of the grid: one row per table cell (dataset, backbone, method, J, variant,
metric) with its mean, spread, confidence interval, n, significance mark and stale flag, as the
pivoted ``report --ci --significance`` decides them (``reports.table.build_table``), and the
downloads of the same results (CSV and Parquet of these rows, the report's CSV and LaTeX)."""
from __future__ import annotations

import csv
import importlib.util
import io
import re
from dataclasses import dataclass

import pandas as pd

from reports.columns import KEY_COLUMNS
from reports.layout import Layout
from reports.pivot import display_names, pivot_layout
from reports.csvtable import render_csv
from reports.latex import render_latex
from reports.table import RowView, TableView, build_table

LEVEL = 0.95  # confidence level of every interval shown (report --ci)
ALPHA = 0.05  # significance level of the marks (report --significance)
FILTERED = ("dataset", "backbone", "method", "J", "metric")  # the overview's filter menus
COLUMNS = ("dataset", "backbone", "method", "J", "variant", "metric", "mean", "std", "ci_low", "ci_high", "ci_method",
           "n", "mark", "stale")
#: text a spreadsheet would read as a formula (OWASP CSV injection); such a cell gets a leading '
_FORMULA_START = re.compile(r"^[=+\-@\t\r]")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class Overview:
    rows: pd.DataFrame  # COLUMNS, one row per filled cell
    layout: Layout
    table: TableView  # the pivoted report's table, which the downloads render as CSV and LaTeX


def overview(frame: pd.DataFrame) -> Overview:
    """The cells of the pivoted table of every result, in the table's order."""
    layout = pivot_layout(frame)
    table = build_table(frame, layout, decimals=1, level=LEVEL, significance=ALPHA)
    names = display_names(frame)
    stale = {key: "; ".join(sorted({str(s) for s in rows["stale"] if isinstance(s, str)}))
             for key, rows in frame.groupby(list(KEY_COLUMNS), dropna=False, sort=False)}
    columns = [(group, metric) for group in layout.columns for metric in group.metrics]
    views = [item for item in table.body if isinstance(item, RowView)]
    records = []
    for row, view in zip(layout.rows, views):
        for (group, metric), cell in zip(columns, view.cells):
            if cell.stat is None:
                continue
            key = dict(zip(KEY_COLUMNS, layout.cell_key(row, group)))
            ci = cell.stat.ci  # reports.intervals' one policy, as report --ci
            procedure = cell.stat.ci_note or ""
            records.append({
                **key, "method": names.get(str(key["method"]), str(key["method"])), "metric": metric.key,
                "mean": cell.stat.mean, "std": cell.stat.std, "ci_low": None if ci is None else ci[0],
                "ci_high": None if ci is None else ci[1], "ci_method": procedure, "n": cell.n,
                "mark": {"best": "best", "tied": "≈"}.get(str(cell.mark), ""),
                "stale": stale.get(tuple(layout.cell_key(row, group)), ""),
            })
    rows = pd.DataFrame.from_records(records, columns=list(COLUMNS)).astype(
        {"mean": "float64", "std": "float64", "ci_low": "float64", "ci_high": "float64"})  # None → NaN
    return Overview(rows=rows, layout=layout, table=table)


def _csv_cell(value: object) -> object:
    if isinstance(value, str) and _FORMULA_START.match(value) and not _NUMBER.match(value):
        return "'" + value
    return value


def guard_csv(text: str) -> bytes:
    """CSV text with every cell a spreadsheet would run as a formula prefixed with ``'``."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([_csv_cell(c) for c in line] for line in csv.reader(io.StringIO(text)))
    return out.getvalue().encode("utf-8")


def downloads(view: Overview) -> dict[str, bytes]:
    """File name → contents: the overview rows as CSV (and Parquet with pyarrow), and the pivoted
    report's CSV and LaTeX (``report --ci --significance``'s writers, on the overview's table)."""
    rows = view.rows.map(_csv_cell)
    files = {"overview.csv": rows.to_csv(index=False, lineterminator="\n").encode("utf-8")}
    if importlib.util.find_spec("pyarrow") is not None:
        files["overview.parquet"] = view.rows.astype({"J": "string"}).to_parquet(index=False)
    files["table.csv"] = guard_csv(render_csv(view.table))
    files["table.tex"] = render_latex(view.table).encode("utf-8")
    return files
