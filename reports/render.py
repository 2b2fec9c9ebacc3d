"""The reports' front door: a tidy frame + a layout (name) → LaTeX, markdown or CSV text."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.csvtable import render_csv
from reports.latex import render_latex
from reports.layout import Layout
from reports.layouts import get_layout
from reports.markdown import render_markdown
from reports.table import TableView, build_table

Format = Literal["latex", "markdown", "csv"]
WRITERS: dict[str, Callable[[TableView], str]] = {
    "latex": render_latex,
    "markdown": render_markdown,
    "csv": render_csv,
}


@dataclass(frozen=True)
class RenderedReport:
    """The rendered table and the cells it could not fill (``"row | column"``, in table order)."""

    text: str
    missing: list[str]
    interval_note: str | None = None  # report --ci (markdown and LaTeX print it; CSV cannot)


def render_report(
    frames: pd.DataFrame,
    layout: str | Layout,
    fmt: Format,
    *,
    against: pd.DataFrame | None = None,
    decimals: int = 1,
    method_macro: bool = False,
    level: float | None = None,
    significance: float | None = None,
) -> RenderedReport:
    """Render the results in ``frames`` (``reports.load``) as the table ``layout``.

    against: published numbers (``reports.load.load_csv``) shown next to ours with the difference.
    decimals: digits after the point; marks and differences use the rounded, shown values.
    method_macro: LaTeX only; vMFProto as the paper's ``\\method{}`` macro.
    level: confidence level in (0, 1): every cell with its interval (``reports.stats``).
    significance: alpha in (0, 1): best / tied marks by paired tests (``reports.significance``).
    """
    spec = get_layout(layout) if isinstance(layout, str) else layout
    if fmt not in WRITERS:
        raise ProtobenchError(f"Unknown report format {fmt!r}; choose one of {', '.join(WRITERS)}.")
    if decimals < 0:
        raise ProtobenchError(f"decimals must be 0 or more, got {decimals}.")
    if method_macro and fmt != "latex":
        raise ProtobenchError("--method-macro only applies to LaTeX; add --format latex.")
    if level is not None and not 0 < level < 1:
        raise ProtobenchError(f"The confidence level must lie strictly between 0 and 100 %, got {100 * level:g} %.")
    if significance is not None and not 0 < significance < 1:
        raise ProtobenchError(f"The significance level must lie strictly between 0 and 1, got {significance:g}.")
    table = build_table(frames, spec, decimals=decimals, against=against, level=level, significance=significance)
    text = render_latex(table, method_macro=True) if method_macro else WRITERS[fmt](table)
    return RenderedReport(text=text, missing=list(table.missing), interval_note=table.interval_note)
