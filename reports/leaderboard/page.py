"""The leaderboard's offline page (``index.html`` with the site's style and script under
``assets/``; no network asset), rendered from the document alone: ``site --leaderboard DIR``
renders the same page into a results site. Every string from a source (method names, labels,
paths) is HTML-escaped (reports/site/html.py)."""
from __future__ import annotations

from importlib import resources
from typing import Any

from reports.leaderboard.plot import board_figure
from reports.leaderboard.tables import (STANDING_HEADER, TIE_MARK, between_lab_lines, board_cells, cell_value,
                                        leaderboard_note, metric_headers, provider_text, rescored_text,
                                        standing_lines)
from reports.site.html import PLOTLY_JS, SITE_CSS, SITE_JS, esc, figure, page, table


def assets() -> dict[str, bytes]:
    """The page's style and script, and plotly.js for its figures (offline: no network asset)."""
    import plotly.offline

    folder = resources.files("reports.site") / "assets"
    return {**{f"assets/{name}": (folder / name).read_bytes() for name in (SITE_CSS, SITE_JS)},
            f"assets/{PLOTLY_JS}": plotly.offline.get_plotlyjs().encode("utf-8")}


def _board(board: dict[str, Any], level: float) -> str:
    metrics, ordered, standing = board_cells(board)
    rows = [(e["label"] + ("" if e["verified"] else " (unverified)"), provider_text(e), len(e["seeds"]),
             *(cell_value(standing.get((m, e["id"])), m) for m in metrics)) for e in ordered]
    details = [(e["label"], e["budget"], " ".join(map(str, e["seeds"])), " ".join(map(str, e["test_images"])),
                "; ".join(e["devices"]), " ".join(e["code_versions"]),
                "; ".join(f"{s['name']} ({s['verification']}, {(s['checksum'] or 'no checksum')[:16]})"
                          for s in e["sources"]),
                "; ".join(e["differs"]), rescored_text(board, e))
               for e in ordered]
    tests = [(r["metric"], next(e["label"] for e in ordered if e["id"] == s["entry"]), s["rank"], s["p"], s["test"],
              s["interval"]) for r in board["rankings"] for s in r["standings"]]
    plotted = board_figure(board, level)
    parts = [f"<h2>{esc(board['id'])}</h2>",
             table(("entry", "method provider", "seeds", *metric_headers(board)), rows,
                   table_id=f"board-{board['id']}", sortable=True),
             f"<h3>Intervals ({100 * level:g}%) and differences to the leader</h3>",
             table(STANDING_HEADER, standing_lines(board), table_id=f"intervals-{board['id']}", sortable=True)]
    if plotted is not None:
        parts.append(figure(f"dots-{board['id']}", plotted, f"{board['id']}: each entry's mean and interval; "
                            "the star marks the leader"))
    if board["missing_methods"]:
        parts.append(f"<p>Not submitted for this board: {esc(', '.join(board['missing_methods']))}.</p>")
    if board["hardware_note"]:
        parts.append(f"<p>{esc(board['hardware_note'])}.</p>")
    parts += ["<details><summary>Provenance of each entry</summary>",
              table(("entry", "budget", "seeds", "test images", "devices", "code", "sources", "differs in",
                     "re-scored from records"), details), "</details>",
              "<details><summary>Procedures of the tests against the leader and of the intervals</summary>",
              table(("metric", "entry", "rank", "p (unadjusted)", "test", "interval"), tests), "</details>"]
    checks = between_lab_lines(board)
    if checks:
        parts += ["<details><summary>Between labs: does the source explain variance beyond seeds?</summary>",
                  table(("entry", "metric", "check"), checks), "</details>"]
    return "\n".join(parts)


def leaderboard_page(document: dict[str, Any], *, downloads: bool = True,
                     nav: tuple[tuple[str, str], ...] = ()) -> str:
    """The page; ``downloads``: link the leaderboard's files (they lie beside it; not in a site)."""
    sources = [(s["name"], s["kind"], s["checksum"] or "", s["verification"], s["runs"],
                "; ".join(f"{u['run']}: {u['reason']}" for u in s["unreadable"]) or "none")
               for s in document["sources"]]
    coverage = [(c["method"], ", ".join(c["missing"]) or "complete") for c in document["coverage"]]
    guide = document["settings"]["guide"]
    body = "\n".join([
        f'<p class="verification">{esc(document["settings"]["verification"])} See the leaderboard guide of '
        f"protobench's documentation, <code>{esc(guide)}</code>.</p>",
        f"<p>{esc(leaderboard_note(document))} Each cell: mean ± std (rank{esc(TIE_MARK)}). "
        f"{esc(document['settings']['ranking'])}; {esc(document['settings']['rescoring'])}.</p>",
        "<p>Download: " + " · ".join(f'<a href="{n}">{n}</a>' for n in
                                     ("leaderboard.json", "leaderboard.schema.json", "leaderboard.csv",
                                      "leaderboard.md", "leaderboard.tex", "eval.yaml")) + "</p>" if downloads else "",
        "<h2>Sources</h2>", table(("source", "kind", "SHA-256", "verification", "runs", "runs that cannot be read"),
                                  sources),
        *(_board(b, document["settings"]["level"]) for b in document["boards"]),
        "<h2>Coverage</h2>", table(("method", "boards without it"), coverage),
    ])
    footer = f"protobench {esc(document['generator']['version'])}, leaderboard schema {document['schema_version']}."
    return page("protobench leaderboard", body, depth=0, plots=True, nav=nav, footer=footer)
