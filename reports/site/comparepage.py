"""A comparison page per compared key: ``protobench compare --by KEY``'s paired differences with
confidence intervals, p-values and Holm-corrected p-values (``reports.paired``), and its CSV."""
from __future__ import annotations

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.paired import comparison_note, comparisons_frame, compare_levels, render_comparisons
from reports.site.html import esc, page, table
from reports.site.overview import LEVEL, guard_csv


def compare_page(frame: pd.DataFrame, by: str) -> tuple[str, bytes | None]:
    """The page comparing the values of ``by`` and its CSV (None where nothing compares: the page says why)."""
    nav = (("index.html", "Overview"), ("runs.html", "All runs"))
    title = f"Paired comparisons of {by}"
    try:
        comparisons = compare_levels(frame, by, level=LEVEL)
    except ProtobenchError as err:
        return page(title, f"<p>Nothing to compare: {esc(err)}</p>", depth=0, plots=False, nav=nav), None
    rows = comparisons_frame(comparisons)
    csv_name = f"compare-{by}.csv"
    body = (f"<p>{esc(comparison_note(comparisons, LEVEL))}</p>"
            f'<p>Download: <a href="{esc(csv_name)}">{esc(csv_name)}</a></p>'
            + table(list(rows.columns), rows.itertuples(index=False), table_id=f"compare-{by}", sortable=True))
    return page(title, body, depth=0, plots=False, nav=nav), guard_csv(render_comparisons(comparisons, "csv", LEVEL))
