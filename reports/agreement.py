"""``protobench agreement RUNS``: whether the metrics agree on the order of the methods.

Per cell (dataset, backbone, J, variant held fixed) the methods are ranked on each metric by their
mean over seeds, best first (a lower-is-better metric, ``reports.columns.LOWER_IS_BETTER``,
negated), and each pair of metrics gets Kendall's τ-b between the two rankings
(``scipy.stats.kendalltau``; Kendall 1945 for the tie correction). Where every ranked method has
per-image records of both metrics, τ gets a percentile bootstrap interval over the test images
(``scipy.stats.bootstrap``; Efron & Tibshirani 1993, §13.3; every metric pair of a cell from one
set of resamples, ``reports.tau_bootstrap``): a resample draws the cell's images with replacement,
and each method's value is again its mean over seeds of the mean over the drawn images, so the
statistic on the original images is the τ of the table. The seeds stay fixed: the interval covers the sampling of test images, not
training variance. A metric defined on fewer images (the robustness stage's scores, on its
subsample; NaN elsewhere) is averaged over the drawn images where it is defined; the label names
how many images each such metric is defined on, and ``n_images`` counts the images where one of
the pair has a value. A metric without per-image values (con) gets τ without an interval, labelled.

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
from reports.columns import LOWER_IS_BETTER
from reports.per_image import PER_IMAGE_METRICS, mismatch, seed_values
from reports.tau_bootstrap import tau_intervals

#: the metrics compared, in table order (those any run of the frame has); those lower-is-better
#: (``LOWER_IS_BETTER``: the robustness stage's) are ranked negated, so every ranking puts the best first
AGREEMENT_METRICS: tuple[str, ...] = ("acc", "con", "sta", "dis", "comp", "purity", "loc", "del", "sanity",
                                      "acc_attacked", "pac", "prc", "plc", "pixel_flipping", "region_perturbation",
                                      "road", "infidelity")
CELL_KEYS: tuple[str, ...] = ("dataset", "backbone", "J", "variant")
MIN_METHODS = 3  # Kendall's τ over two methods is ±1 whatever the data


@dataclass(frozen=True)
class Bootstrap:
    """How the intervals over test images are drawn (stated beside every interval)."""

    n_resamples: int = 2000
    seed: int = 0
    level: float = 0.95
    method: str = "percentile"  # Efron & Tibshirani 1993 §13.3; BCa's jackknife is unstable for a τ over few methods

    def label(self, images: int, defined: dict[str, tuple[int, int]] | None = None) -> str:
        """The procedure with its n: the ``images`` resampled, and for each metric defined on fewer
        of them (``defined``: metric → the fewest and most images a ranked method has it on; the
        robustness stage's scores, on its subsample), on how many."""
        fewer = [f"{metric} defined on {low}" + ("" if low == high else f"–{high} per method")
                 for metric, (low, high) in (defined or {}).items() if low < images]
        subsets = f" ({', '.join(fewer)})" if fewer else ""
        return (f"{self.method} bootstrap over {images} test images{subsets} (scipy.stats.bootstrap, "
                f"{self.n_resamples} resamples, seed {self.seed}; seeds fixed)")


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
    n_images: int | None  # the images on which one of the two metrics has a value (the rest cannot move τ)
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
    means = cell.groupby("method")[metrics].mean()
    return means.apply(lambda column: -column if column.name in LOWER_IS_BETTER else column)


def kendall(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b (scipy); NaN where one ranking ties every method."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant input: scipy warns and returns NaN
        return float(stats.kendalltau(x, y).statistic)


def per_image_cube(cell: pd.DataFrame, methods: list[str], metric: str,
                   ids: pd.Index | None = None) -> tuple[np.ndarray, pd.Index] | None:
    """methods × seeds × images per-image values of ``metric`` (NaN-padded where a method has fewer
    seeds) with the image ids of its last axis (``ids``' order where given, else the first run's),
    or None where a method has no per-image records of it. Differing image sets are refused."""
    if metric not in PER_IMAGE_METRICS:
        return None
    tables: list[pd.DataFrame] = []
    for method in methods:
        runs = cell[(cell["method"] == method) & cell[metric].notna()]
        values = seed_values(runs[["seed", "run_dir"]].reset_index(drop=True), metric)
        if values is None:
            return None
        tables.append(values)
    order = tables[0].columns if ids is None else ids
    for method, table in zip(methods, tables):
        if not table.columns.equals(order) and set(table.columns) != set(order):
            first = cell[cell["method"] == methods[0]]["run_dir"].iloc[0]
            other = cell[cell["method"] == method]["run_dir"].iloc[0]
            raise mismatch(str(first), str(other), set(order), set(table.columns))
    seeds = max(len(t) for t in tables)
    cube = np.full((len(methods), seeds, len(order)), np.nan)
    for m, table in enumerate(tables):
        cube[m, : len(table)] = table.to_numpy() if table.columns.equals(order) else table[order].to_numpy()
    return cube, order


def cell_cubes(cell: pd.DataFrame, methods: list[str], metrics: list[str]) -> dict[str, np.ndarray | None]:
    """Each metric's :func:`per_image_cube` over ``methods``, on one image order and one number of
    seeds (padded with NaN), so that a resample draws the same images for every metric."""
    found: dict[str, tuple[np.ndarray, pd.Index] | None] = {}
    ids: pd.Index | None = None
    for metric in metrics:
        found[metric] = per_image_cube(cell, methods, metric, ids)
        if found[metric] is not None and ids is None:
            ids = found[metric][1]
    seeds = max((cube.shape[1] for cube, _ in filter(None, found.values())), default=0)
    padded: dict[str, np.ndarray | None] = {}
    for metric, got in found.items():
        if got is None:
            padded[metric] = None
            continue
        cube = got[0]
        cube = -cube if metric in LOWER_IS_BETTER else cube
        padded[metric] = cube if cube.shape[1] == seeds else np.concatenate(
            [cube, np.full((cube.shape[0], seeds - cube.shape[1], cube.shape[2]), np.nan)], axis=1)
    return padded


def metric_taus(frame: pd.DataFrame, metrics: list[str], boot: Bootstrap) -> list[Tau]:
    """Kendall's τ of every pair of metrics in every cell with at least three methods ranked on both."""
    return [tau for label, cell in cells(frame) for tau in cell_taus(label, cell, metrics, boot)]


def cell_taus(label: str, cell: pd.DataFrame, metrics: list[str], boot: Bootstrap) -> list[Tau]:
    """One cell's τ of every pair of metrics ranking three methods or more; the intervals of the
    pairs ranking the same methods from one set of resamples (``reports.tau_bootstrap``)."""
    means = method_means(cell, metrics)
    ranked: list[tuple[str, str, tuple[str, ...], float]] = []
    for a, b in combinations(metrics, 2):
        both = means[[a, b]].dropna()
        if len(both) >= MIN_METHODS:
            ranked.append((a, b, tuple(str(m) for m in both.index), kendall(both[a].to_numpy(), both[b].to_numpy())))
    groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for a, b, methods, _ in ranked:
        groups.setdefault(methods, []).append((a, b))
    cubes = {methods: cell_cubes(cell, list(methods), list(dict.fromkeys(m for pair in pairs for m in pair)))
             for methods, pairs in groups.items()}  # each run's records read once per set of ranked methods
    intervals: dict[tuple[str, str], tuple[float, float]] = {}
    for methods, pairs in groups.items():
        drawn = [(a, b) for a, b, m, tau in ranked if m == methods and not math.isnan(tau)
                 and cubes[methods][a] is not None and cubes[methods][b] is not None]
        if drawn:
            used = {m: cubes[methods][m] for m in dict.fromkeys(m for pair in drawn for m in pair)}
            lows, highs = tau_intervals(used, drawn, n_resamples=boot.n_resamples, seed=boot.seed, level=boot.level,
                                        method=boot.method)
            intervals.update({pair: (float(low), float(high)) for pair, low, high in zip(drawn, lows, highs)})
    taus: list[Tau] = []
    for a, b, methods, tau in ranked:
        missing = [m for m in (a, b) if cubes[methods][m] is None]
        if missing:
            why = f"no interval: no per-image values of {' and '.join(missing)}"
            taus.append(Tau(label, a, b, len(methods), tau, math.nan, math.nan, None, why))
        elif math.isnan(tau):
            taus.append(Tau(label, a, b, len(methods), tau, math.nan, math.nan, None,
                            "no interval: one metric ties every method"))
        else:
            pair = {m: cubes[methods][m] for m in (a, b)}
            images = cubes[methods][a].shape[-1]
            taus.append(Tau(label, a, b, len(methods), tau, *intervals[(a, b)], defined_images(pair),
                            boot.label(images, {m: defined_per_method(cube) for m, cube in pair.items()})))
    return taus


def defined_per_method(cube: np.ndarray) -> tuple[int, int]:
    """The fewest and the most images on which a method of ``cube`` (methods × seeds × images) has a
    value on some seed."""
    counts = (~np.isnan(cube)).any(axis=1).sum(axis=1)
    return int(counts.min()), int(counts.max())


def defined_images(cubes: dict[str, np.ndarray]) -> int:
    """The images on which some method has a value of one of the metrics (``cubes``: metric →
    methods × seeds × images): those whose draws can move the pair's τ."""
    return int(np.any([(~np.isnan(cube)).any(axis=(0, 1)) for cube in cubes.values()], axis=0).sum())


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
