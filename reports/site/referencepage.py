"""The site's gap page (``protobench site --reference METHOD``): each method's gap to the reference
row per metric with its interval, as ``report --reference`` prints it (``reports.reference``)."""
from __future__ import annotations

import pandas as pd

from reports.reference import reference_gaps, render_gaps
from reports.site.html import esc, page, table
from reports.site.overview import LEVEL, guard_csv


def reference_page(frame: pd.DataFrame, reference: str) -> tuple[str, bytes]:
    """The page and its CSV; a reference not in the runs is refused (before the site is written)."""
    gaps = reference_gaps(frame, reference, LEVEL)
    csv_text = render_gaps(gaps, reference, "csv", LEVEL)
    note = render_gaps(gaps, reference, "markdown", LEVEL).rstrip("\n").rsplit("\n\n", 1)[-1]
    rows = [(g.dataset, g.backbone, g.method, g.J, g.variant, g.metric, g.gap, g.ci_low, g.ci_high, g.n_seeds,
             "" if g.n_images is None else g.n_images, g.test) for g in gaps]
    headers = ("dataset", "backbone", "method", "J", "variant", "metric", f"gap to {reference}", "CI low", "CI high",
               "seeds", "images", "interval")
    body = (f"<p>{esc(note)}</p><p>Download: <a href=\"reference.csv\">reference.csv</a></p>"
            + table(headers, rows, table_id="reference-gaps", sortable=True))
    nav = (("index.html", "Overview"), ("runs.html", "All runs"))
    return page(f"Gap to the reference row {reference}", body, depth=0, plots=False, nav=nav), guard_csv(csv_text)
