"""The site's interactive figures as Plotly figure specs (plain dicts; site.js draws them with the
bundled plotly.js): each metric against J with seed error bars and n, the accuracy–explanation
trade-off per method with error bars, the critical-difference ranks, training curves, per-image
distributions. The aggregates are the reports' own (``critical_difference``; the means and spreads as ``protobench plot`` draws them)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from benchmark.errors import ProtobenchError
from reports.cd import critical_difference
from reports.columns import KEY_COLUMNS, PERCENT_METRICS
from reports.pivot import METRICS, display_names

Figure = dict[str, Any]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _finite_list(values: np.ndarray) -> list[float | None]:
    """``values`` as a list, None where a value is not finite (NaN, ±inf: JSON has none)."""
    listed = values.tolist()
    for i in np.flatnonzero(~np.isfinite(values)):
        listed[i] = None
    return listed


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
    layout = _layout(f"{header} against J (mean ± std over seeds)", "J", _unit(metric, header))
    layout["xaxis"].update(_integer_axis(sorted({int(j) for j in points["J"]})))
    return {"data": traces, "layout": layout}


def _integer_axis(values: Sequence[int]) -> dict[str, Any]:
    """Ticks at the integer values only (J: never 2.5), and half a step of room on either side, so
    one J value sits in the middle of its axis, not at an edge."""
    step = min((b - a for a, b in zip(values, values[1:])), default=1)
    return {"tickmode": "array", "tickvals": list(values), "ticktext": [str(v) for v in values],
            "range": [values[0] - step / 2, values[-1] + step / 2]}


def _unit(name: str, label: str) -> str:
    """An axis title with its unit: percent for the suite's percent metrics, logits for a margin."""
    if name in PERCENT_METRICS:
        return f"{label} (%)"
    return f"{label} (logit)" if name == "margin" else label


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
            f"{cd.incomplete_blocks} incomplete block(s) left out. A block is a cell's mean over seeds: these ranks and "
            f"tests do not see seed or test-image variance within a block (the comparisons pages do).")
    return figure, note


def _panels(title: str, axes: Sequence[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    """A layout of stacked panels, one per (x title, y title), each with its own axes and unit."""
    layout: dict[str, Any] = {"title": {"text": title}, "margin": {"t": 50}, "height": 260 * len(axes) + 60,
                              "grid": {"rows": len(axes), "columns": 1, "pattern": "independent"}, **extra}
    for i, (x, y) in enumerate(axes, start=1):
        suffix = "" if i == 1 else str(i)
        layout[f"xaxis{suffix}"] = {"title": {"text": x}}
        layout[f"yaxis{suffix}"] = {"title": {"text": y}}
    return layout


def _on_panel(trace: dict[str, Any], panel: int) -> dict[str, Any]:
    return {**trace, "xaxis": "x" if panel == 1 else f"x{panel}", "yaxis": "y" if panel == 1 else f"y{panel}"}


def curves(stages: Sequence[str], values: dict[str, Sequence[float]]) -> Figure:
    """A run's metrics.jsonl against the epoch: the loss terms in one panel, the learning rates
    (``lr.*``, log scale) in another, never on one axis."""
    epochs = list(range(1, len(stages) + 1))
    groups = [("loss term (unweighted)", [n for n in values if n != "seconds" and not n.startswith("lr.")], {}),
              ("learning rate (log scale)", [n for n in values if n.startswith("lr.")], {"type": "log"})]
    groups = [g for g in groups if g[1]]
    traces = [_on_panel({"type": "scatter", "mode": "lines+markers", "name": name, "x": epochs,
                         "y": [_finite(v) for v in values[name]], "text": list(stages),
                         "hovertemplate": "epoch %{x} (%{text}): %{y:.4g}"}, panel)
              for panel, (_, names, _) in enumerate(groups, start=1) for name in names]
    layout = _panels("Training curves", [("epoch", title) for title, _, _ in groups])
    for panel, (_, _, axis) in enumerate(groups, start=1):
        layout["yaxis" if panel == 1 else f"yaxis{panel}"].update(axis)
    return {"data": traces, "layout": layout}


def distributions(table: pd.DataFrame, columns: Sequence[str]) -> Figure:
    """One histogram panel per per-image quantity (the run's per-image records), each on its own
    axis with its unit (a logit margin and a percentage never share one)."""
    traces = [_on_panel({"type": "histogram", "name": column, "x": _finite_list(table[column].to_numpy(dtype=float))},
                        panel) for panel, column in enumerate(columns, start=1)]
    return {"data": traces, "layout": _panels("Per-image distributions",
                                              [(_unit(column, column), "images") for column in columns],
                                              showlegend=False)}
