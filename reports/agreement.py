"""``protobench agreement RUNS``: whether the metrics agree on the order of the methods.

Per cell (dataset, backbone, J, variant held fixed) the methods are ranked on each metric by their
mean over seeds (every metric here is higher-is-better, docs/protocol/metrics.md), and each pair of
metrics gets Kendall's τ-b between the two rankings (``scipy.stats.kendalltau``; Kendall 1945 for
the tie correction). Where every ranked method has per-image records of both metrics, τ gets a
percentile bootstrap interval over the test images (``scipy.stats.bootstrap``; Efron & Tibshirani
1993, §13.3): a resample draws the cell's images with replacement, and each method's value is again
its mean over seeds of the mean over the drawn images, so the statistic on the original images is
the τ of the table. The seeds stay fixed: the interval covers the sampling of test images, not
training variance. A metric without per-image values (con) gets τ without an interval, labelled.

Beside it: each metric's reliability over seeds (``reports.reliability``), the stability of the
rankings across J and across backbones, and which method orderings the grid supports
(``reports.supported``). docs/guides/agreement.md.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

from benchmark.errors import ProtobenchError
from reports.per_image import PER_IMAGE_METRICS, mismatch, seed_values

#: the metrics compared, in table order (those any run of the frame has); all higher-is-better
AGREEMENT_METRICS: tuple[str, ...] = ("acc", "con", "sta", "dis", "comp", "purity", "loc", "del", "sanity")
CELL_KEYS: tuple[str, ...] = ("dataset", "backbone", "J", "variant")
MIN_METHODS = 3  # Kendall's τ over two methods is ±1 whatever the data


@dataclass(frozen=True)
class Bootstrap:
    """How the intervals over test images are drawn (stated beside every interval)."""

    n_resamples: int = 2000
    seed: int = 0
    level: float = 0.95
    method: str = "percentile"  # Efron & Tibshirani 1993 §13.3; BCa's jackknife is unstable for a τ over few methods

    def label(self, images: int) -> str:
        return (f"{self.method} bootstrap over {images} test images (scipy.stats.bootstrap, {self.n_resamples} "
                f"resamples, seed {self.seed}; seeds fixed)")


@dataclass(frozen=True)
class Tau:
    """Kendall's τ-b between the method rankings of two metrics in one cell."""

    cell: str
    metric_a: str
    metric_b: str
    methods: int
    tau: float
    ci_low: float
    ci_high: float
    n_images: int | None
    interval: str  # the procedure with its n, or why there is none


@dataclass(frozen=True)
class Stability:
    """Kendall's τ-b between a metric's method rankings at two values of ``key`` (J or backbone)."""

    key: str
    cell: str  # the other keys held fixed
    metric: str
    a: str
    b: str
    methods: int
    tau: float


def cell_label(named: dict, varying: list[str]) -> str:
    return "/".join(f"{k}={named[k]}" for k in varying) or "all"


def present_metrics(frame: pd.DataFrame) -> list[str]:
    return [m for m in AGREEMENT_METRICS if m in frame.columns and frame[m].notna().any()]


def check_agreement_input(frame: pd.DataFrame) -> list[str]:
    """The metrics to compare; one error, before any work, for input that cannot show agreement."""
    if (frame["n_seeds"] > 1).any() or frame["seed"].isna().any():
        raise ProtobenchError("agreement ranks single runs by their mean over seeds; drop the published CSV (means "
                              "over seeds) from the inputs.")
    methods = sorted(frame["method"].dropna().astype(str).unique())
    if len(methods) < MIN_METHODS:
        raise ProtobenchError(f"agreement needs at least {MIN_METHODS} methods to rank (Kendall's τ of two is ±1 "
                              f"whatever the data); these results hold {len(methods)}: {', '.join(methods) or 'none'}. "
                              f"Add runs of more methods to RUNS.")
    metrics = present_metrics(frame)
    if len(metrics) < 2:
        raise ProtobenchError(f"agreement compares the rankings of two or more metrics; these results have "
                              f"{', '.join(metrics) or 'none'} of {', '.join(AGREEMENT_METRICS)}. Evaluate the runs "
                              f"with their explanation metrics (`protobench evaluate RUN_DIR`).")
    return metrics


def cells(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The frame's cells (every key but the method held fixed), labelled by the keys that vary."""
    varying = [k for k in CELL_KEYS if frame[k].astype(str).nunique() > 1]
    return [(cell_label(dict(zip(CELL_KEYS, key)), varying), cell)
            for key, cell in frame.groupby(list(CELL_KEYS), sort=True, dropna=False)]


def method_means(cell: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Each method's mean over seeds (rows: methods) of each metric (NaN where it has none)."""
    for method, runs in cell.groupby("method"):
        if runs["seed"].duplicated().any():
            raise ProtobenchError(f"method {method} has two runs of one seed in a cell ({', '.join(runs['run_dir'])}); "
                                  "they differ in settings the keys do not show: pass one runs directory per setting.")
    return cell.groupby("method")[metrics].mean()


def kendall(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b (scipy); NaN where one ranking ties every method."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant input: scipy warns and returns NaN
        return float(stats.kendalltau(x, y).statistic)


def per_image_cube(cell: pd.DataFrame, methods: list[str], metric: str) -> np.ndarray | None:
    """methods × seeds × images per-image values of ``metric`` (NaN-padded where a method has fewer
    seeds; images aligned by id), or None where a method has no per-image records of it."""
    if metric not in PER_IMAGE_METRICS:
        return None
    tables: list[pd.DataFrame] = []
    for method in methods:
        runs = cell[(cell["method"] == method) & cell[metric].notna()]
        values = seed_values(runs[["seed", "run_dir"]].reset_index(drop=True), metric)
        if values is None:
            return None
        tables.append(values)
    ids = tables[0].columns
    for method, table in zip(methods[1:], tables[1:]):
        if set(table.columns) != set(ids):
            first = cell[cell["method"] == methods[0]]["run_dir"].iloc[0]
            other = cell[cell["method"] == method]["run_dir"].iloc[0]
            raise mismatch(str(first), str(other), set(ids), set(table.columns))
    seeds = max(len(t) for t in tables)
    cube = np.full((len(methods), seeds, len(ids)), np.nan)
    for m, table in enumerate(tables):
        cube[m, : len(table)] = table[ids].to_numpy()
    return cube


def resampled_means(cube: np.ndarray, images: np.ndarray) -> np.ndarray:
    """Each method's mean over seeds of its mean over ``images`` (indices, shape (..., n)): (methods, ...)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a seed with no defined value among the drawn images
        per_seed = np.nanmean(cube[:, :, images], axis=-1)  # methods × seeds × ...
        return np.nanmean(per_seed, axis=1)


def tau_statistic(cube_a: np.ndarray, cube_b: np.ndarray):
    """The bootstrap statistic: τ of the two metrics' method means over the drawn images."""

    def statistic(images: np.ndarray, axis: int = -1) -> np.ndarray:
        images = np.moveaxis(np.asarray(images), axis, -1)
        a, b = resampled_means(cube_a, images), resampled_means(cube_b, images)
        if images.ndim == 1:
            return np.asarray(kendall(a, b))
        return np.array([kendall(a[:, i], b[:, i]) for i in range(images.shape[0])])

    return statistic


def tau_interval(cube_a: np.ndarray, cube_b: np.ndarray, boot: Bootstrap) -> tuple[float, float]:
    """The bootstrap interval of τ over the images (``scipy.stats.bootstrap``)."""
    images = cube_a.shape[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate resample distribution: the NaN interval says so
        result = stats.bootstrap((np.arange(images),), tau_statistic(cube_a, cube_b), n_resamples=boot.n_resamples,
                                 batch=max(1, 2_000_000 // max(1, cube_a.size)), vectorized=True,
                                 confidence_level=boot.level, method=boot.method, rng=np.random.default_rng(boot.seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def metric_taus(frame: pd.DataFrame, metrics: list[str], boot: Bootstrap) -> list[Tau]:
    """Kendall's τ of every pair of metrics in every cell with at least three methods ranked on both."""
    taus: list[Tau] = []
    for label, cell in cells(frame):
        means = method_means(cell, metrics)
        cubes: dict[tuple[str, ...], np.ndarray | None] = {}
        for a, b in combinations(metrics, 2):
            both = means[[a, b]].dropna()
            if len(both) < MIN_METHODS:
                continue
            tau = kendall(both[a].to_numpy(), both[b].to_numpy())
            methods = [str(m) for m in both.index]
            for m in (a, b):
                if (m, *methods) not in cubes:  # each run's records read once per set of ranked methods
                    cubes[(m, *methods)] = per_image_cube(cell, methods, m)
            cube = {m: cubes[(m, *methods)] for m in (a, b)}
            missing = [m for m in (a, b) if cube[m] is None]
            if missing:
                why = f"no interval: no per-image values of {' and '.join(missing)}"
                taus.append(Tau(label, a, b, len(both), tau, math.nan, math.nan, None, why))
                continue
            if math.isnan(tau):
                taus.append(Tau(label, a, b, len(both), tau, math.nan, math.nan, None,
                                "no interval: one metric ties every method"))
                continue
            low, high = tau_interval(cube[a], cube[b], boot)
            images = cube[a].shape[-1]
            taus.append(Tau(label, a, b, len(both), tau, low, high, images, boot.label(images)))
    return taus


def rank_stability(frame: pd.DataFrame, metrics: list[str], key: str) -> list[Stability]:
    """Per metric, τ between the method rankings (means over seeds) at each pair of values of
    ``key`` (J or backbone), the other cell keys held fixed; methods ranked at both values only."""
    others = [k for k in CELL_KEYS if k != key]
    varying = [k for k in others if frame[k].astype(str).nunique() > 1]
    found: list[Stability] = []
    for group, sub in frame.groupby(others, sort=True, dropna=False):
        label = cell_label(dict(zip(others, group)), varying)
        values = sorted(sub[key].unique().tolist(), key=lambda v: (isinstance(v, str), v))
        means = {v: method_means(sub[sub[key] == v], metrics) for v in values}
        for a, b in combinations(values, 2):
            for metric in metrics:
                both = pd.concat([means[a][metric], means[b][metric]], axis=1, join="inner").dropna()
                if len(both) < MIN_METHODS:
                    continue
                found.append(Stability(key, label, metric, str(a), str(b), len(both),
                                       kendall(both.iloc[:, 0].to_numpy(), both.iloc[:, 1].to_numpy())))
    return found
