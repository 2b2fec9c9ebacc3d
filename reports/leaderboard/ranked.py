"""The metrics a leaderboard ranks: which way is better, their unit, and how its tables print them.

The five of the ordinary evaluation are percentages where higher is better
(docs/protocol/metrics.md). The robustness stage's (docs/protocol/metrics.md, "Robustness stage")
are ranked on every board where an entry has them, each in its own direction:
:data:`reports.columns.LOWER_IS_BETTER` names those where the lowest mean leads (``pac``, ``prc``,
``plc``, ``pixel_flipping``, ``road``, ``infidelity``); ``acc_attacked`` and
``region_perturbation`` are higher-is-better. Two of the stage's scores are not ranked:
``acc_clean`` (accuracy on the stage's subsample: ``acc`` ranks accuracy on the whole test split)
and the local-perturbation profile ``lpa_*`` (which visual characteristic a prototype responds to:
a description, with no better direction).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from reports.columns import LOWER_IS_BETTER

#: the ordinary evaluation's ranked metrics (percent, higher is better)
CORE_METRICS = ("acc", "con", "sta", "dis", "comp")
#: the robustness stage's ranked metrics, in the order its guide lists them
ROBUSTNESS_RANKED = ("acc_attacked", "pac", "prc", "plc", "pixel_flipping", "region_perturbation", "road",
                     "infidelity")
#: every metric a board may rank, in the order the tables show them
RANKED_METRICS = CORE_METRICS + ROBUSTNESS_RANKED
HIGHER, LOWER = "higher", "lower"


@dataclass(frozen=True)
class MetricText:
    """How a ranked metric is named and printed."""

    name: str  # in words
    unit: str  # what its values are
    spec: str  # Python format spec of its values in the tables (also a d3 format for the figure's hover)


METRIC_TEXT = {
    "acc": MetricText("accuracy", "percent", ".1f"),
    "con": MetricText("consistency", "percent", ".1f"),
    "sta": MetricText("stability", "percent", ".1f"),
    "dis": MetricText("distinctiveness", "percent", ".1f"),
    "comp": MetricText("comprehensiveness", "percent", ".1f"),
    "acc_attacked": MetricText("accuracy under the misalignment attack", "percent", ".1f"),
    "pac": MetricText("prototype activation change under the misalignment attack", "percent", ".1f"),
    "prc": MetricText("prototype rank change under the misalignment attack", "prototypes", ".2f"),
    "plc": MetricText("prototype location change under the misalignment attack", "percent", ".1f"),
    "pixel_flipping": MetricText("pixel flipping", "area under the true class's softmax curve", ".2f"),
    "region_perturbation": MetricText("region perturbation", "AOPC", ".3f"),
    "road": MetricText("ROAD", "fraction of removal levels the prediction survives", ".3f"),
    "infidelity": MetricText("infidelity", "mean squared error", ".3g"),
}


def better(metric: str) -> str:
    """``lower`` for a metric of :data:`reports.columns.LOWER_IS_BETTER`, else ``higher``."""
    return LOWER if metric in LOWER_IS_BETTER else HIGHER


def is_better(metric: str, value: float, other: float) -> bool:
    """Whether ``value`` of ``metric`` is strictly better than ``other``."""
    return value < other if metric in LOWER_IS_BETTER else value > other


def direction_text() -> str:
    """Which way is better for every ranked metric, in words (one line)."""
    higher = [m for m in RANKED_METRICS if better(m) == HIGHER]
    lower = [m for m in RANKED_METRICS if better(m) == LOWER]
    return f"higher is better for {', '.join(higher)}; lower is better for {', '.join(lower)}"


def number(metric: str, value: float | None) -> str:
    """``value`` printed as the tables print ``metric`` (:data:`METRIC_TEXT`)."""
    return "–" if value is None or math.isnan(value) else format(value, METRIC_TEXT[metric].spec)


def axis_title(metric: str) -> str:
    """The figure's axis title of ``metric``: its name, unit and direction."""
    unit = METRIC_TEXT[metric].unit
    return f"{metric} ({'%' if unit == 'percent' else unit}; {better(metric)} is better)"
