"""The site's robustness page: one bar chart per method of its local-perturbation profile (the mean
relative similarity drop of its top prototype under each perturbation, focused and dual; Nauta et al.,
benchmark/robustness/perturbation.py), averaged over the method's runs that recorded one, with n.
Read from each run's ``result.json`` (``robustness.metrics``); no torch."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from reports.load import read_result_json
from reports.pivot import display_names
from reports.site.html import esc, figure, page

ROBUSTNESS_PAGE = "robustness.html"
PERTURBATIONS = ("brightness", "contrast", "saturation", "hue", "blur", "distortion")
TARGETS = ("focus", "dual")


def method_profiles(frame: pd.DataFrame) -> dict[str, tuple[dict[str, list[float]], int]]:
    """Per method: each ``lpa_*`` key's values over its runs (finite ones), and how many runs had a profile."""
    found: dict[str, tuple[dict[str, list[float]], int]] = {}
    for method, source in zip(frame["method"].astype(str), frame["source"].astype(str)):
        section = read_result_json(Path(source)).get("robustness")
        scores = section.get("metrics") if isinstance(section, dict) else None
        if not isinstance(scores, dict) or not any(str(k).startswith("lpa_") and _finite(v) for k, v in scores.items()):
            continue  # no profile, or one undefined everywhere (a reference row's)
        values, runs = found.get(method, ({}, 0))
        for key, value in scores.items():
            if str(key).startswith("lpa_") and _finite(value):
                values.setdefault(str(key), []).append(float(value))
        found[method] = (values, runs + 1)
    return found


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def profile_figure(label: str, values: dict[str, list[float]], runs: int) -> dict:
    """One grouped bar chart: a bar per perturbation, focus and dual side by side (null where no run has it)."""
    traces = []
    for target in TARGETS:
        means = [(sum(v) / len(v)) if (v := values.get(f"lpa_{p}_{target}")) else None for p in PERTURBATIONS]
        traces.append({"type": "bar", "name": target, "x": list(PERTURBATIONS), "y": means,
                       "hovertemplate": f"{target} · %{{x}}: %{{y:.3f}}"})
    return {"data": traces, "layout": {"title": {"text": f"{label}: what its top prototype responds to (n = {runs} "
                                                         f"run{'s' if runs != 1 else ''})"},
                                       "barmode": "group", "xaxis": {"title": {"text": "perturbation"}},
                                       "yaxis": {"title": {"text": "relative similarity drop (s − s′)/s"}},
                                       "margin": {"t": 50}}}


def robustness_page(frame: pd.DataFrame) -> str:
    nav = (("index.html", "Overview"), ("runs.html", "All runs"))
    profiles = method_profiles(frame)
    if not profiles:
        body = ("<p>No run has a local-perturbation profile: <code>protobench evaluate RUN_DIR --robustness "
                "perturbation</code> records one.</p>")
        return page("What the prototypes respond to", body, depth=0, plots=False, nav=nav)
    names = display_names(frame)
    parts = ["<p>Per method, the mean over its runs of each image's relative similarity drop of the predicted "
             "class's most relevant prototype at its peak, under each perturbation inside its region "
             "(<em>focus</em>) or outside it (<em>dual</em>) (Nauta et al.; docs/guides/robustness.md). "
             "Near 0: insensitive; large focus drop: the prototype encodes that characteristic in its region; "
             "large dual drop: it depends on its context.</p>"]
    for method, (values, runs) in sorted(profiles.items()):
        label = names.get(method, method)
        parts.append(figure(f"lpa-{esc(method)}", profile_figure(label, values, runs), f"{label}: perturbation profile"))
    return page("What the prototypes respond to", "\n".join(parts), depth=0, plots=True, nav=nav)
