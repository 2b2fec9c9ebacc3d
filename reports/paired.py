"""``protobench compare RUNS… --by KEY``: the levels of one key compared cell by cell, paired on
seed and test image, Holm-corrected across the comparisons of one call.

A cell is every other key (dataset, backbone, method, J, variant) held fixed; in it, level ``a``
is compared with level ``b`` on the seeds both have. A metric with per-image values (acc, sta,
dis, comp), when every paired run has per-image records, is compared on the crossed seeds × test
images design (images aligned by id, never by row; differing image sets refused); otherwise (con,
or runs without records) over seeds (paired Student t), a fallback that covers training variance
only and says so. Each row's interval and p come from one procedure, so the interval excludes 0
exactly when p < 1 − level; intervals are clipped to [−100, 100] and marked, and are not adjusted
for the multiple comparisons (the Holm-adjusted p is). A comparison a metric cannot make (one side
has no value on any common seed) keeps its row and says why. The probability of improvement is
over the runs' values (rliable's P(a > b)), in the metric's direction: for the robustness stage's
lower-is-better scores (``reports.columns.LOWER_IS_BETTER``) it is P(a < b) + ½ P(a = b). Differences
are in the metric's units: percent points for the percentages, whose higher value is the better one;
for the lower-is-better scores a negative a − b favours a (docs/protocol/metrics.md). The procedures:
``reports.stats``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from benchmark.csv_cells import frame_csv
from benchmark.errors import ProtobenchError, did_you_mean
from reports.cell_text import markdown_cell
from reports.columns import KEY_COLUMNS, LOWER_IS_BETTER, ROBUSTNESS_METRICS, difference_range
from reports.per_image import PER_IMAGE_METRICS, paired, seed_table
from reports.stats import (NO_INTERVAL, SEED_ONLY, Difference, holm, paired_image_difference, paired_seed_difference,
                           probability_of_improvement)

COMPARED_METRICS: tuple[str, ...] = ("acc", "con", "sta", "dis", "comp",  # percent, higher is better
                                     *ROBUSTNESS_METRICS)  # the robustness stage's (reports.columns: direction)


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
    prob_improvement: float  # P(a better than b) + ½ P(a = b) over the two levels' runs (a < b: LOWER_IS_BETTER)
    n_seeds: int
    n_images: int | None  # test images the crossed procedure compares (per-image records), else None
    test: str  # the procedure of ci and p_value with its n, or why there is no test (then both are NaN)
    clipped: bool  # the interval was clipped to the difference's range [−100, 100]


CSV_COLUMNS: tuple[str, ...] = tuple(Comparison.__dataclass_fields__)


def compare_levels(frame: pd.DataFrame, by: str, *, baseline: str | None = None,
                   metrics: list[str] | None = None, level: float = 0.95) -> list[Comparison]:
    """Every comparison of the levels of ``by`` (each against ``baseline``, or every pair)."""
    if by not in KEY_COLUMNS:
        raise ProtobenchError(f"--by {by!r} is not a key of the results{did_you_mean(by, KEY_COLUMNS)}; compare along one of {', '.join(KEY_COLUMNS)}.")
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
                diff = cell_difference(runs_a, runs_b, metric, level, names=(f"{by}={a}", f"{by}={b}"))
                if diff is None:
                    continue
                sign = -1.0 if metric in LOWER_IS_BETTER else 1.0  # improvement is a lower value there
                poi = probability_of_improvement((sign * runs_a[metric].dropna()).tolist(),
                                                 (sign * runs_b[metric].dropna()).tolist())
                rows.append((label, metric, a, b, diff, poi, diff.n_seeds, diff.n_images))
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


def cell_difference(runs_a: pd.DataFrame, runs_b: pd.DataFrame, metric: str, level: float, *,
                    names: tuple[str, str] = ("a", "b")) -> Difference | None:
    """``a − b`` on ``metric`` over the seeds both have it for (runs indexed by seed); None
    without a common seed. On the crossed seeds × images design where both sides have per-image
    records of the metric, else paired on seeds. Where one side (``names``) has the metric on no
    common seed, a Difference without a test that says so."""
    seeds = sorted(set(runs_a.index) & set(runs_b.index))
    if not seeds:
        return None
    value_a, value_b = (runs[metric].reindex(seeds).to_numpy(dtype=float) for runs in (runs_a, runs_b))
    lacking = [name for name, values in zip(names, (value_a, value_b)) if np.isnan(values).all()]
    if lacking:
        return Difference(math.nan, NO_INTERVAL, math.nan,
                          f"{' and '.join(lacking)} has no {metric} on seed(s) {', '.join(map(str, seeds))}: no test",
                          n_seeds=0)
    kept = ~(np.isnan(value_a) | np.isnan(value_b))
    both = [s for s, keep in zip(seeds, kept) if keep]
    dirs_a, dirs_b = (runs["run_dir"].reindex(both).tolist() for runs in (runs_a, runs_b))
    a, b = seed_table(both, dirs_a, metric), seed_table(both, dirs_b, metric)
    if a is not None and b is not None:
        a_values, b_values = paired(a, b, ", ".join(map(str, dirs_a)), ", ".join(map(str, dirs_b)))
        return paired_image_difference(a_values, b_values, level, difference_range(metric))
    why = SEED_ONLY
    if metric in PER_IMAGE_METRICS and (a is not None or b is not None):  # a labelled fallback, never a mix
        why = f"training variance only: {names[0] if a is None else names[1]} has no per-image {metric} records"
    return paired_seed_difference(value_a[kept].tolist(), value_b[kept].tolist(), level, difference_range(metric), why)


def comparisons_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    return pd.DataFrame([asdict(c) for c in comparisons], columns=list(CSV_COLUMNS))


CLIPPED_MARK = "‡"


def comparison_note(comparisons: list[Comparison], level: float) -> str:
    """What the table's numbers are: the difference, interval, tests and correction."""
    from reports.stats import CROSSED_METHOD, MIN_DISCORDANT, MIN_IMAGES, SEED_ONLY

    return (f"difference = a − b (percent points, mean over the paired seeds and images); CI and p from one "
            f"procedure, named with its n in the test column (the {100 * level:g}% CI excludes 0 exactly when "
            f"p < {1 - level:.2g}; it is not adjusted for multiplicity, p_holm is). Metrics with per-image records: "
            f"{CROSSED_METHOD}, images paired by id (≥ {MIN_IMAGES} images; fewer than {MIN_DISCORDANT} images "
            f"where the two differ: exact sign-flip test, no interval); otherwise paired Student t over the seeds "
            f"(≥ 2 seeds; {SEED_ONLY}). {CLIPPED_MARK}: CI clipped to [−100, 100]. p_holm: Holm over the "
            f"{sum(not math.isnan(c.p_value) for c in comparisons)} tested comparisons of this call; P(a better): "
            f"probability of improvement over the two levels' runs, P(a > b) + ½ P(a = b), or P(a < b) + ½ P(a = b) "
            f"for the lower-is-better {', '.join(LOWER_IS_BETTER)}.")


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

    lines = [[*map(markdown_cell, (c.cell, c.metric, c.a, c.b)), "–" if math.isnan(c.difference) else f"{c.difference:+.{decimals}f}", ci(c), p(c.p_value),
              p(c.p_holm), "–" if math.isnan(c.prob_improvement) else f"{c.prob_improvement:.2f}", str(c.n_seeds), "–" if c.n_images is None else str(c.n_images), c.test]
             for c in comparisons]
    headers = ["cell", "metric", "a", "b", "a − b", f"{100 * level:g}% CI (unadjusted)", "p", "p (Holm)", "P(a better)", "seeds",
               "images", "test"]
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True) + "\n\n" + \
        comparison_note(comparisons, level) + "\n"
