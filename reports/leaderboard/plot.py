"""The leaderboard's dot-and-interval figure of one board: per ranked metric, each entry's mean
with its interval (the standing's own ``ci_low``/``ci_high``: the one policy of reports/intervals.py),
the leader marked (the best mean: the highest, or the lowest where lower is better; each axis
says which), as a Plotly figure spec (a plain dict) that the site's script draws with the
bundled plotly.js (reports/site/html.py ``figure``), offline. A function of the document alone."""
from __future__ import annotations

from typing import Any

from benchmark.escaping import plain_label
from reports.leaderboard.ranked import METRIC_TEXT, axis_title

LEADER_SYMBOL = "star"
ENTRY_SYMBOL = "circle"


def _panel_axes(panel: int) -> tuple[str, str]:
    return ("x", "y") if panel == 1 else (f"x{panel}", f"y{panel}")


def board_figure(board: dict[str, Any], level: float) -> dict[str, Any] | None:
    """One panel per metric of ``board``: a dot at each entry's mean, a horizontal bar over its
    interval (none where it has none: the hover says why), the leader as a star; None for a board
    without a ranking."""
    if not board["rankings"]:
        return None
    labels = {e["id"]: plain_label(e["label"]) for e in board["entries"]}  # one line, no bidi control
    traces, layout = [], {"title": {"text": f"{plain_label(board['id'])}: mean and {100 * level:g}% interval per entry "
                                            "(★ the leader)"},
                          "margin": {"t": 50, "l": 160}, "showlegend": False,
                          "height": sum(130 + 30 * len(r["standings"]) for r in board["rankings"]) + 80,
                          "grid": {"rows": len(board["rankings"]), "columns": 1, "pattern": "independent",
                                   "ygap": 0.5}}  # room for each panel's axis title
    for panel, ranking in enumerate(board["rankings"], start=1):
        standings = ranking["standings"]
        has = [s["ci_low"] is not None and s["ci_high"] is not None for s in standings]
        x_axis, y_axis = _panel_axes(panel)
        traces.append({
            "type": "scatter", "mode": "markers", "xaxis": x_axis, "yaxis": y_axis, "name": ranking["metric"],
            "x": [s["mean"] for s in standings], "y": [labels[s["entry"]] for s in standings],
            "marker": {"symbol": [LEADER_SYMBOL if s["group"] == "best" else ENTRY_SYMBOL for s in standings],
                       "size": [14 if s["group"] == "best" else 9 for s in standings]},
            "error_x": {"type": "data", "symmetric": False, "visible": True,
                        "array": [s["ci_high"] - s["mean"] if ok else 0.0 for s, ok in zip(standings, has)],
                        "arrayminus": [s["mean"] - s["ci_low"] if ok else 0.0 for s, ok in zip(standings, has)]},
            "text": [plain_label(f"{s['group']}, rank {s['rank']}; {s['interval']}") for s in standings],
            "hovertemplate": f"%{{y}}: %{{x:{METRIC_TEXT[ranking['metric']].spec}}}<br>%{{text}}<extra></extra>",
        })
        suffix = "" if panel == 1 else str(panel)
        layout[f"xaxis{suffix}"] = {"title": {"text": axis_title(ranking["metric"])}}
        layout[f"yaxis{suffix}"] = {"autorange": "reversed", "type": "category"}
    return {"data": traces, "layout": layout}
