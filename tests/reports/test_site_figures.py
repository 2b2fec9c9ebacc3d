"""The site's figures read like figures: J axes tick at the J values only, with room on either
side so one J value sits mid-axis; a run's loss terms and learning rates, and its per-image logit
margins and percentages, each get their own panel and axis title with the unit."""
from __future__ import annotations

import pandas as pd

from reports.site.plots import curves, distributions, metric_vs_j


def _frame(js: list[int]) -> pd.DataFrame:
    rows = [{"dataset": "cub", "backbone": "b", "method": "vmfproto", "J": j, "variant": "default", "seed": s,
             "con": 10.0 + j + s, "method_display_name": "vMFProto"} for j in js for s in (0, 1)]
    return pd.DataFrame(rows)


def test_j_ticks_are_the_j_values_and_one_j_sits_mid_axis() -> None:
    axis = metric_vs_j(_frame([3, 5, 7]), "con")["layout"]["xaxis"]
    assert axis["tickvals"] == [3, 5, 7] and axis["range"] == [2.0, 8.0]
    single = metric_vs_j(_frame([5]), "con")["layout"]
    assert single["xaxis"]["tickvals"] == [5] and single["xaxis"]["range"] == [4.5, 5.5]
    assert single["yaxis"]["title"]["text"] == "Con. (%)"


def test_losses_and_learning_rates_never_share_an_axis() -> None:
    figure = curves(("train", "train"), {"ce": (1.0, 0.5), "ppd": (0.3, 0.2), "lr.mu": (1e-3, 5e-4),
                                         "seconds": (2.0, 2.0)})
    panels = {t["name"]: t["yaxis"] for t in figure["data"]}
    assert panels == {"ce": "y", "ppd": "y", "lr.mu": "y2"}  # seconds is not drawn
    layout = figure["layout"]
    assert layout["yaxis"]["title"]["text"].startswith("loss") and layout["yaxis2"]["type"] == "log"


def test_margins_and_percentages_get_one_panel_each_with_its_unit() -> None:
    table = pd.DataFrame({"margin": [0.5, -0.2, 1.1], "sta": [80.0, 90.0, 100.0]})
    figure = distributions(table, ["margin", "sta"])
    assert [t["xaxis"] for t in figure["data"]] == ["x", "x2"]
    titles = [figure["layout"][axis]["title"]["text"] for axis in ("xaxis", "xaxis2")]
    assert titles == ["margin (logit)", "sta (%)"]
