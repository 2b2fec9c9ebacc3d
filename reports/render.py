"""The reports' front door: a tidy frame + a layout name → LaTeX or markdown text."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.latex import render_latex
from reports.layout import Layout
from reports.layouts import get_layout
from reports.markdown import render_markdown
from reports.table import TableView, build_table

Format = Literal["latex", "markdown"]
WRITERS: dict[str, Callable[[TableView], str]] = {"latex": render_latex, "markdown": render_markdown}


@dataclass(frozen=True)
class RenderedReport:
    """The rendered table and the cells it could not fill (``"row | column"``, in table order)."""

    text: str
    missing: list[str]


def render_report(
    frames: pd.DataFrame,
    layout: str | Layout,
    fmt: Format,
    *,
    against: pd.DataFrame | None = None,
    decimals: int = 1,
) -> RenderedReport:
    """Render the results in ``frames`` (``reports.load``) as the table ``layout``.

    against: published numbers (``reports.load.load_csv``) shown next to ours with the difference.
    decimals: digits after the point; marks and differences use the rounded, shown values.
    """
    spec = get_layout(layout) if isinstance(layout, str) else layout
    if fmt not in WRITERS:
        raise ProtobenchError(f"Unknown report format {fmt!r}; choose one of {', '.join(WRITERS)}.")
    if decimals < 0:
        raise ProtobenchError(f"decimals must be 0 or more, got {decimals}.")
    table = build_table(frames, spec, decimals=decimals, against=against)
    return RenderedReport(text=WRITERS[fmt](table), missing=list(table.missing))
