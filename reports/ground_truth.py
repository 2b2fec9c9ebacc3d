"""``protobench agreement``'s section "against ground truth": on FunnyBirds runs, how each suite metric
ranks the trained models (methods × backbones × J × seeds) against the FunnyBirds protocols' Cor, Com, Con
and BI (result.json's ``funnybirds`` section; docs/protocol/funnybirds.md), as Spearman's ρ
(``scipy.stats.spearmanr``).

The models of one method share its design, its code and its hyperparameter choices, so they are not
independent draws: the interval is a cluster bootstrap over methods (``scipy.stats.bootstrap`` resamples
the methods with replacement; each resample's ρ is computed over every run of the drawn methods, a
method drawn twice counted twice; Field & Welsh 2007, "Bootstrapping clustered data", JRSS-B 69(3)).
A resample that draws one method only, or leaves a column constant, has no ρ: the percentile interval is
taken over the resamples where ρ is defined, and the row states how many those are. tests/reports/
test_ground_truth_agreement.py checks its false-positive rate by simulation.

The control rows correlate the same suite metric with the protocols of each run's head at initialisation
(``funnybirds.control``): a metric that tracks ground truth should not track a random head's, so those
intervals should hold 0; beside them, the mean of each protocol for trained and initial heads (chance level).
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from reports.agreement import Bootstrap

GROUND_TRUTH: tuple[str, ...] = ("cor", "com", "con", "bi")
MIN_CLUSTERS = 3  # a cluster bootstrap over two methods has three distinct resamples


@dataclass(frozen=True)
class TruthRho:
    """Spearman's ρ of one suite metric against one FunnyBirds protocol across runs."""

    metric: str
    truth: str
    heads: str  # "trained" or "control (head at initialisation)"
    runs: int
    methods: int
    rho: float
    ci_low: float
    ci_high: float
    interval: str  # the procedure and its n, or why there is none


def funnybirds_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Per row of ``frame`` (a result's ``source`` path) its FunnyBirds scores and the control's, as
    columns ``fb_<key>`` and ``control_<key>`` (NaN where the result has none)."""
    rows = []
    for source in frame["source"]:
        try:
            section = json.loads(Path(str(source)).read_text(encoding="utf-8")).get("funnybirds") or {}
        except (OSError, ValueError):
            section = {}
        scores, control = section.get("scores") or {}, section.get("control") or {}
        rows.append({**{f"fb_{k}": _float(scores.get(k)) for k in GROUND_TRUTH},
                     **{f"control_{k}": _float(control.get(k)) for k in GROUND_TRUTH}})
    return pd.DataFrame(rows, index=frame.index)


def _float(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ (scipy); NaN where either column is constant."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: scipy warns and returns NaN
        return float(stats.spearmanr(x, y).statistic)


def cluster_interval(x: np.ndarray, y: np.ndarray, clusters: np.ndarray, boot: Bootstrap) -> tuple[float, float, int]:
    """Percentile interval of ρ(x, y) under a bootstrap of the clusters (module docstring) and how many
    of ``boot.n_resamples`` resamples had a ρ."""
    labels = np.unique(clusters)
    members = [np.flatnonzero(clusters == c) for c in labels]

    def rho_of(drawn: np.ndarray) -> float:
        rows = np.concatenate([members[int(k)] for k in drawn])
        return spearman(x[rows], y[rows])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples: scipy warns, their ρ is NaN
        result = stats.bootstrap((np.arange(len(labels)),), rho_of, vectorized=False, n_resamples=boot.n_resamples,
                                 method="percentile", confidence_level=boot.level, rng=np.random.default_rng(boot.seed))
    draws = result.bootstrap_distribution
    defined = draws[~np.isnan(draws)]
    if defined.size == 0:
        return math.nan, math.nan, 0
    tail = 100 * (1 - boot.level) / 2
    low, high = np.percentile(defined, [tail, 100 - tail])
    return float(low), float(high), int(defined.size)


def against_ground_truth(frame: pd.DataFrame, metrics: list[str], boot: Bootstrap) -> list[TruthRho]:
    """ρ of every suite metric in ``metrics`` against each ground truth, for trained heads and the control."""
    truth = funnybirds_columns(frame)
    found: list[TruthRho] = []
    for prefix, heads in (("fb", "trained"), ("control", "control (head at initialisation)")):
        for metric in metrics:
            for key in GROUND_TRUTH:
                both = pd.DataFrame({"x": frame[metric], "y": truth[f"{prefix}_{key}"],
                                     "method": frame["method"].astype(str)}).dropna()
                if both.empty:
                    continue
                n_methods = both["method"].nunique()
                rho = spearman(both["x"].to_numpy(), both["y"].to_numpy())
                if n_methods < MIN_CLUSTERS or math.isnan(rho):
                    why = (f"no interval: {n_methods} method(s), a cluster bootstrap needs {MIN_CLUSTERS}"
                           if n_methods < MIN_CLUSTERS else "no interval: one column is constant")
                    found.append(TruthRho(metric, key, heads, len(both), n_methods, rho, math.nan, math.nan, why))
                    continue
                low, high, kept = cluster_interval(both["x"].to_numpy(), both["y"].to_numpy(),
                                                   both["method"].to_numpy(), boot)
                found.append(TruthRho(metric, key, heads, len(both), n_methods, rho, low, high,
                                      f"{boot.method} cluster bootstrap over {n_methods} methods ({len(both)} runs; "
                                      f"scipy.stats.bootstrap, {boot.n_resamples} resamples, {kept} with ρ defined, "
                                      f"seed {boot.seed})"))
    return found


def chance_levels(frame: pd.DataFrame) -> pd.DataFrame:
    """Per method, the mean of each ground truth for the trained heads and for the heads at initialisation."""
    truth = funnybirds_columns(frame).assign(method=frame["method"].astype(str).to_numpy())
    columns = [f"{p}_{k}" for k in GROUND_TRUTH for p in ("fb", "control")]
    return truth.groupby("method")[columns].mean().dropna(how="all")


def has_ground_truth(frame: pd.DataFrame) -> bool:
    return bool(funnybirds_columns(frame)[[f"fb_{k}" for k in GROUND_TRUTH]].notna().any().any())
