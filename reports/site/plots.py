"""The site's interactive figures as Plotly figure specs (plain dicts; site.js draws them with the
bundled plotly.js): each metric against J with seed error bars and n, the accuracy–explanation
trade-off per method with error bars, the critical-difference ranks, training curves, per-image
distributions. The aggregates are the reports' own (``critical_difference``; the means and spreads as ``protobench plot`` draws them)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.cd import critical_difference
from reports.columns import KEY_COLUMNS
from reports.pivot import METRICS, display_names

Figure = dict[str, Any]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}},
            "margin": {"t": 50}, **extra}


def metric_vs_j(frame: pd.DataFrame, metric: str) -> Figure | None:
    """Mean ± sample std over seeds of ``metric`` against J (as ``protobench plot``'s points), one
    line per method × backbone × dataset × variant; n in the hover."""
    rows = frame.dropna(subset=[metric])
    if rows.empty:
        return None
    names = display_names(frame)
    series = ["method", "backbone", "dataset", "variant"]
    points = rows.groupby([*series, "J"], sort=True, dropna=False)[metric].agg(["mean", "std", "size"]).reset_index()
    traces = []
    for (method, backbone, dataset, variant), line in points.groupby(series, sort=True, dropna=False):
        traces.append({
            "type": "scatter", "mode": "lines+markers",
            "name": f"{names.get(str(method), str(method))} · {backbone} · {dataset} · {variant}",
            "x": [int(j) for j in line["J"]], "y": line["mean"].tolist(),
            "error_y": {"type": "data", "array": [_finite(v) or 0.0 for v in line["std"]], "visible": True},
            "text": [f"n={n}" for n in line["size"]], "hovertemplate": "J=%{x}<br>%{y:.2f} (%{text})",
        })
    header = METRICS[metric].header.md
    return {"data": traces, "layout": _layout(f"{header} against J (mean ± std over seeds)", "J", header)}


def trade_off(frame: pd.DataFrame, explanation: str = "con") -> Figure | None:
    """Accuracy against an explanation metric, one point per cell (mean ± std over seeds), per method."""
    rows = frame.dropna(subset=["acc", explanation])
    if rows.empty:
        return None
    names = display_names(frame)
    cells = rows.groupby(list(KEY_COLUMNS), dropna=False, sort=True).agg(
        acc=("acc", "mean"), acc_std=("acc", "std"), x=(explanation, "mean"), x_std=(explanation, "std"),
        n=("acc", "size")).reset_index()
    traces = []
    for method, points in cells.groupby("method", sort=True):
        traces.append({
            "type": "scatter", "mode": "markers", "name": names.get(str(method), str(method)),
            "x": points["x"].tolist(), "y": points["acc"].tolist(),
            "error_x": {"type": "data", "array": [_finite(v) or 0.0 for v in points["x_std"]], "visible": True},
            "error_y": {"type": "data", "array": [_finite(v) or 0.0 for v in points["acc_std"]], "visible": True},
            "text": [f"{d} · {b} · J={j} · {v} · n={n}" for d, b, j, v, n in
                     zip(points["dataset"], points["backbone"], points["J"], points["variant"], points["n"])],
            "hovertemplate": "%{text}<br>acc %{y:.2f}, " + explanation + " %{x:.2f}",
        })
    header = METRICS[explanation].header.md
    return {"data": traces, "layout": _layout(f"Accuracy against {header} per cell (± std over seeds)", header,
                                              "Acc.")}


def cd_ranks(frame: pd.DataFrame, metric: str = "acc") -> tuple[Figure | None, str]:
    """Mean ranks of the methods over the blocks of the other keys (``reports.cd``), and a note:
    the Friedman p and the groups no Holm-corrected Wilcoxon test separates (or why none)."""
    try:
        cd = critical_difference(frame, metric)
    except ProtobenchError as err:
        return None, str(err)
    names = display_names(frame)
    labels = [names.get(t, t) for t in cd.treatments]
    figure = {"data": [{"type": "bar", "orientation": "h", "x": cd.mean_ranks, "y": labels,
                        "hovertemplate": "%{y}: mean rank %{x:.2f}"}],
              "layout": _layout(f"Mean rank on {METRICS[metric].header.md} over {cd.n_blocks} block(s) (1 = best)",
                                "mean rank", "", yaxis={"autorange": "reversed"})}
    groups = "; ".join(" ≈ ".join(labels[i:j + 1]) for i, j in cd.cliques if j > i) or "none"
    friedman = "" if cd.friedman_p is None else f"Friedman p = {cd.friedman_p:.3g}. "
    note = (f"{friedman}Not separated by Wilcoxon–Holm at α = {cd.alpha:g}: {groups}. "
            f"{cd.incomplete_blocks} incomplete block(s) left out.")
    return figure, note


def curves(stages: Sequence[str], values: dict[str, Sequence[float]]) -> Figure:
    """One line per logged quantity against the epoch (a run's metrics.jsonl)."""
    epochs = list(range(1, len(stages) + 1))
    traces = [{"type": "scatter", "mode": "lines+markers", "name": name, "x": epochs,
               "y": [_finite(v) for v in series], "text": list(stages), "hovertemplate": "epoch %{x} (%{text}): %{y:.4g}"}
              for name, series in values.items() if name != "seconds"]
    return {"data": traces, "layout": _layout("Training curves", "epoch", "value")}


def distributions(table: pd.DataFrame, columns: Sequence[str]) -> Figure:
    """A histogram per per-image quantity (the run's per-image records)."""
    traces = [{"type": "histogram", "name": column, "x": [_finite(v) for v in table[column].astype(float)],
               "opacity": 0.6} for column in columns]
    return {"data": traces, "layout": _layout("Per-image distributions", "value", "images", barmode="overlay")}
