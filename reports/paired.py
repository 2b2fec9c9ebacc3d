"""``protobench compare RUNS… --by KEY``: the levels of one key compared cell by cell, paired on
seed and test image, Holm-corrected across the comparisons of one call.

A cell is every other key (dataset, backbone, method, J, variant) held fixed; in it, level ``a``
is compared with level ``b`` on the seeds both have. Accuracy, when every paired run has
per-image records, is compared on the same test images, the image being the unit (each image's
difference averaged over the seeds; Student t over images); otherwise, and for the explanation
metrics, over seeds (paired Student t). Each row's interval and p come from one procedure, so the
interval excludes 0 exactly when p < 1 − level; intervals are clipped to [−100, 100] and marked.
The probability of improvement is over the runs' values (rliable's P(a > b)). All metrics here
are higher-is-better percentages (docs/protocol/metrics.md). The procedures: ``reports.stats``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from benchmark.csv_cells import frame_csv
from benchmark.errors import ProtobenchError
from reports.aggregate import seed_correctness
from reports.cell_text import markdown_cell
from reports.columns import KEY_COLUMNS, difference_range
from reports.stats import (Difference, holm, paired_image_difference, paired_seed_difference,
                           probability_of_improvement)

COMPARED_METRICS: tuple[str, ...] = ("acc", "con", "sta", "dis", "comp")  # percent, higher is better


@dataclass(frozen=True)
class Comparison:
    """Level ``a`` against level ``b`` of the compared key, in one cell, on one metric."""

    cell: str
    metric: str
    a: str
    b: str
    difference: float  # mean of a − b over the paired seeds (and images)
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    prob_improvement: float  # P(a > b) + ½ P(a = b) over the two levels' runs
    n_seeds: int
    n_images: int | None  # test images each paired seed compares (accuracy on records), else None
    test: str  # the procedure of ci and p_value, or why there is no test (then both are NaN)
    clipped: bool  # the interval was clipped to the difference's range [−100, 100]


CSV_COLUMNS: tuple[str, ...] = tuple(Comparison.__dataclass_fields__)


def compare_levels(frame: pd.DataFrame, by: str, *, baseline: str | None = None,
                   metrics: list[str] | None = None, level: float = 0.95) -> list[Comparison]:
    """Every comparison of the levels of ``by`` (each against ``baseline``, or every pair)."""
    if by not in KEY_COLUMNS:
        raise ProtobenchError(f"--by {by!r} is not a key of the results; compare along one of {', '.join(KEY_COLUMNS)}.")
    metrics = list(metrics or [m for m in COMPARED_METRICS if frame[m].notna().any()])
    unknown = [m for m in metrics if m not in COMPARED_METRICS]
    if unknown:
        raise ProtobenchError(f"--metrics {', '.join(unknown)}: compare takes {', '.join(COMPARED_METRICS)}.")
    if (frame["n_seeds"] > 1).any() or frame["seed"].isna().any():
        raise ProtobenchError("compare pairs single runs on their seeds; drop the published CSV (means over seeds) "
                              "from the inputs.")
    levels = sorted(frame[by].dropna().unique().tolist())
    if len(levels) < 2:
        raise ProtobenchError(f"compare --by {by} needs at least two values of {by}; the results have only "
                              f"{', '.join(map(str, levels)) or 'none'}.")
    pairs = _pairs([str(v) for v in levels], baseline, by)
    others = [k for k in KEY_COLUMNS if k != by]
    varying = [k for k in others if frame[k].astype(str).nunique() > 1]
    rows: list[tuple[str, str, str, str, Difference, float, int, int | None]] = []
    for key, cell in frame.groupby(others, sort=True, dropna=False):
        named = dict(zip(others, key))
        label = "/".join(f"{k}={named[k]}" for k in varying) or "all"
        by_level = {str(v): runs.set_index("seed") for v, runs in cell.groupby(by)}
        for v, runs in by_level.items():
            if runs.index.duplicated().any():
                raise ProtobenchError(
                    f"cell {label}, {by}={v} has two runs of one seed ({', '.join(runs['run_dir'].astype(str))}); "
                    "they differ in settings the keys do not show: pass one runs directory per setting.")
        for a, b in pairs:
            if a not in by_level or b not in by_level:
                continue
            runs_a, runs_b = by_level[a], by_level[b]
            for metric in metrics:
                paired = cell_difference(runs_a, runs_b, metric, level)
                if paired is None:
                    continue
                diff, n_seeds, n_images = paired
                poi = probability_of_improvement(runs_a[metric].dropna().tolist(), runs_b[metric].dropna().tolist())
                rows.append((label, metric, a, b, diff, poi, n_seeds, n_images))
    if not rows:
        raise ProtobenchError(f"No cell has two values of {by} on a common seed; nothing to compare.")
    adjusted = holm([row[4].p_value for row in rows])
    return [Comparison(cell=label, metric=metric, a=a, b=b, difference=d.difference, ci_low=d.ci[0], ci_high=d.ci[1],
                       p_value=d.p_value, p_holm=p_holm, prob_improvement=poi, n_seeds=n, n_images=n_images,
                       test=d.test, clipped=d.clipped)
            for (label, metric, a, b, d, poi, n, n_images), p_holm in zip(rows, adjusted)]


def _pairs(levels: list[str], baseline: str | None, by: str) -> list[tuple[str, str]]:
    if baseline is None:
        return [(levels[j], levels[i]) for i in range(len(levels)) for j in range(i + 1, len(levels))]
    if baseline not in levels:
        raise ProtobenchError(f"--baseline {baseline!r} is not a value of {by}; the results have "
                              f"{', '.join(levels)}.")
    return [(level, baseline) for level in levels if level != baseline]


def cell_difference(runs_a: pd.DataFrame, runs_b: pd.DataFrame, metric: str,
                    level: float) -> tuple[Difference, int, int | None] | None:
    """``a − b`` on ``metric`` over the seeds both have it for (runs indexed by seed), with the
    number of seeds and, where accuracy is paired on per-image records, of test images; None
    without a common seed. Paired on images for accuracy where both sides have per-image
    records, else on seeds."""
    seeds = sorted(set(runs_a.index) & set(runs_b.index))
    both = [s for s in seeds if not (math.isnan(runs_a.at[s, metric]) or math.isnan(runs_b.at[s, metric]))]
    if not both:
        return None
    runs_a, runs_b = runs_a.loc[both], runs_b.loc[both]
    if metric == "acc":
        a, b = seed_correctness(runs_a.reset_index()), seed_correctness(runs_b.reset_index())
        if a is not None and b is not None:
            shapes = {len(v) for v in (*a.values(), *b.values())}
            if len(shapes) != 1:
                raise ProtobenchError("compare: the runs' per-image records hold different numbers of test images "
                                      f"({', '.join(map(str, sorted(shapes)))}); compare runs on one test split.")
            return paired_image_difference(np.stack([a[s] for s in both]), np.stack([b[s] for s in both]),
                                           level), len(both), shapes.pop()
    return (paired_seed_difference(runs_a[metric].tolist(), runs_b[metric].tolist(), level, difference_range(metric)),
            len(both), None)


def comparisons_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    return pd.DataFrame([asdict(c) for c in comparisons], columns=list(CSV_COLUMNS))


CLIPPED_MARK = "‡"


def comparison_note(comparisons: list[Comparison], level: float) -> str:
    """What the table's numbers are: the difference, interval, tests and correction."""
    from reports.stats import MIN_IMAGES

    return (f"difference = a − b (percent points, mean over paired seeds); CI and p from one procedure "
            f"(the {100 * level:g}% CI excludes 0 exactly when p < {1 - level:.2g}): accuracy with per-image "
            f"records: Student t over the test images, each image's difference averaged over the paired seeds "
            f"(≥ {MIN_IMAGES} images); otherwise paired Student t over the seeds (≥ 2 seeds); fewer: no test. "
            f"{CLIPPED_MARK}: CI clipped to [−100, 100]. p_holm: Holm over the "
            f"{sum(not math.isnan(c.p_value) for c in comparisons)} tested comparisons of this call; P(a>b): "
            f"probability of improvement over the two levels' runs.")


def render_comparisons(comparisons: list[Comparison], fmt: str, level: float, decimals: int = 1) -> str:
    """The comparisons as a markdown table with its note, or as CSV (full precision)."""
    frame = comparisons_frame(comparisons)
    if fmt == "csv":
        return frame_csv(frame)  # no formula cell (a hostile method name)
    from tabulate import tabulate

    def number(value: float) -> str:
        return "–" if value is None or math.isnan(value) else f"{value:.{decimals}f}"

    def p(value: float) -> str:
        return "no test" if math.isnan(value) else f"{value:.3g}"

    def ci(c: Comparison) -> str:
        if math.isnan(c.ci_low):
            return "–"
        return f"[{number(c.ci_low)}, {number(c.ci_high)}]" + (CLIPPED_MARK if c.clipped else "")

    lines = [[*map(markdown_cell, (c.cell, c.metric, c.a, c.b)), f"{c.difference:+.{decimals}f}", ci(c), p(c.p_value), p(c.p_holm),
              f"{c.prob_improvement:.2f}", str(c.n_seeds), "–" if c.n_images is None else str(c.n_images), c.test]
             for c in comparisons]
    headers = ["cell", "metric", "a", "b", "a − b", f"{100 * level:g}% CI", "p", "p (Holm)", "P(a>b)", "seeds",
               "images", "test"]
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True) + "\n\n" + \
        comparison_note(comparisons, level) + "\n"
