"""The site's agreement page: ``protobench agreement``'s report (``reports.agreement_report``) as
HTML tables, and its τ table as CSV; where the runs cannot show agreement, the page says why."""
from __future__ import annotations

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.agreement import Bootstrap
from reports.agreement_report import (build_agreement, chance_rows, ground_truth_note, ground_truth_rows,
                                      reliability_note, reliability_rows, render_agreement, stability_rows,
                                      supported_lines, tau_note, tau_rows)
from reports.site.html import esc, page, table
from reports.site.overview import LEVEL, guard_csv

AGREEMENT_PAGE = "agreement.html"
AGREEMENT_CSV = "agreement.csv"


def agreement_page(frame: pd.DataFrame) -> tuple[str, bytes | None]:
    """The page and the τ table's CSV (None where the runs cannot show agreement: the page says why)."""
    nav = (("index.html", "Overview"), ("runs.html", "All runs"))
    title = "Whether the metrics agree"
    try:
        report = build_agreement(frame, Bootstrap(level=LEVEL))
    except ProtobenchError as err:
        return page(title, f"<p>No agreement to show: {esc(err)}</p>", depth=0, plots=False, nav=nav), None
    parts = [f'<p>Metrics: {esc(", ".join(report.metrics))}. As <code>protobench agreement</code>. Download: '
             f'<a href="{AGREEMENT_CSV}">{AGREEMENT_CSV}</a></p>',
             "<h2>Kendall's τ between the metrics' method rankings</h2>", f"<p>{esc(tau_note(report))}</p>",
             table(*tau_rows(report), table_id="agreement-tau", sortable=True),
             "<h2>Reliability over seeds</h2>", f"<p>{esc(reliability_note())}</p>",
             table(*reliability_rows(report), table_id="agreement-icc", sortable=True)]
    for key, found in report.stability.items():
        parts += [f"<h2>Rank stability across {esc(key)}</h2>",
                  table(*stability_rows(found), table_id=f"agreement-{esc(key)}", sortable=True) if found
                  else f"<p>One value of {esc(key)} per cell (or fewer than three methods at two).</p>"]
    parts += ["<h2>What this grid supports</h2>",
              "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in supported_lines(report)) + "</ul>"]
    if report.ground_truth is not None:  # FunnyBirds runs: as `protobench agreement`'s section
        parts += ["<h2>Against ground truth</h2>", f"<p>{esc(ground_truth_note())}</p>",
                  table(*ground_truth_rows(report), table_id="agreement-ground-truth", sortable=True)]
        if report.chance is not None and not report.chance.empty:
            parts.append(table(*chance_rows(report.chance), table_id="agreement-chance", sortable=True))
    return page(title, "\n".join(parts), depth=0, plots=False, nav=nav), guard_csv(render_agreement(report, "csv"))
