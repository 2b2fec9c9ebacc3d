"""The site's HTML pieces: escaping of every data string, tables, embedded figure data and the
page frame. Figure data goes into ``<script type="application/json">`` with ``<``, ``>`` and
``&`` written as JSON escapes, so no data string can close the element or open another."""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from benchmark.escaping import html_text

PLOTLY_JS = "plotly.min.js"
SITE_JS = "site.js"
SITE_CSS = "site.css"


def esc(value: object) -> str:
    """Any value as HTML text (quotes too, so it is safe in attributes; bidirectional and control
    characters removed: benchmark/escaping.py)."""
    return html_text(value)


def cell_text(value: object) -> str:
    """A value as a table shows it: floats with 4 significant digits, NaN and None empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def safe_json(value: Any) -> str:
    """JSON that cannot end a ``<script>`` element (``</script>`` in a string stays inert)."""
    text = json.dumps(value, sort_keys=True, allow_nan=False, default=str, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def table(header: Sequence[str], rows: Iterable[Sequence[object]], *, table_id: str | None = None,
          sortable: bool = False, raw_columns: frozenset[int] = frozenset()) -> str:
    """An HTML table of escaped cells (``raw_columns``: cells already HTML, built by this module)."""
    attrs = (f' id="{esc(table_id)}"' if table_id else "") + (' class="sortable"' if sortable else "")
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{c if i in raw_columns else esc(cell_text(c))}</td>"
                                      for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"


def key_values(pairs: Iterable[tuple[str, object]]) -> str:
    """A two-column table of names and values (structures as sorted JSON)."""
    rows = [(k, v if isinstance(v, (str, int, float)) or v is None else json.dumps(v, sort_keys=True, default=str))
            for k, v in pairs]
    return table(("field", "value"), rows)


def figure(figure_id: str, spec: dict[str, Any], caption: str) -> str:
    """A Plotly figure: its data as inert JSON, drawn by site.js, with PNG and SVG download buttons."""
    return (f'<figure class="plot"><div class="plotly-target" id="{esc(figure_id)}"></div>'
            f'<script type="application/json" data-figure="{esc(figure_id)}">{safe_json(spec)}</script>'
            f'<figcaption>{esc(caption)} <button type="button" data-download="png" data-for="{esc(figure_id)}">PNG'
            f'</button> <button type="button" data-download="svg" data-for="{esc(figure_id)}">SVG</button>'
            "</figcaption></figure>")


def page(title: str, body: str, *, depth: int, plots: bool, nav: Sequence[tuple[str, str]] = (),
         footer: str = "") -> str:
    """A whole page; ``depth``: folders below the site root (asset links are relative, for file://)."""
    up = "../" * depth
    scripts = (f'<script src="{up}assets/{PLOTLY_JS}"></script>' if plots else "") + \
        f'<script src="{up}assets/{SITE_JS}"></script>'
    links = " · ".join(f'<a href="{up}{esc(href)}">{esc(label)}</a>' for href, label in nav)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
            f'<link rel="stylesheet" href="{up}assets/{SITE_CSS}"></head>\n<body><nav>{links}</nav><main>'
            f"<h1>{esc(title)}</h1>\n{body}\n</main><footer>{footer}</footer>{scripts}</body></html>\n")
