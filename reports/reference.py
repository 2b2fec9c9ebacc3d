"""``protobench report RUNS --reference METHOD``: each method's gap to a reference row (the
linear probe or k-NN of issue 40) on the same dataset and trunk, for every metric both have.

A reference row has no prototypes, so it is matched on dataset and backbone (and on J and variant
only where the reference was run at several); the gap is ``method − reference`` over the seeds
both have, with the interval of ``reports.paired.cell_difference``: the crossed seeds × test
images procedure where both sides have per-image records of the metric, else paired Student t over
the seeds (training variance only, labelled in the ``test`` column); docs/guides/statistics.md.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from benchmark.csv_cells import frame_csv
from benchmark.errors import ProtobenchError, did_you_mean
from reports.cell_text import markdown_cell
from reports.paired import cell_difference

#: the metrics a gap is reported for, in table order (those any run of the frame has)
GAP_METRICS: tuple[str, ...] = ("acc", "con", "sta", "dis", "comp", "purity", "loc", "del", "sanity")


@dataclass(frozen=True)
class Gap:
    """``method − reference`` on one metric, in one (dataset, backbone, J, variant) cell."""

    dataset: str
    backbone: str
    method: str
    J: int
    variant: str
    metric: str
    gap: float
    ci_low: float
    ci_high: float
    n_seeds: int
    n_images: int | None
    test: str


def check_reference(frame: pd.DataFrame, reference: str) -> None:
    """One error naming the methods the results hold (and the closest) when ``reference`` is not one."""
    present = sorted(frame["method"].dropna().astype(str).unique())
    if reference not in present:
        raise ProtobenchError(f"--reference {reference!r} is not a method of these results{did_you_mean(reference, present)}; "
                              f"they hold {', '.join(present) or 'none'}: name one of them, or add the reference's "
                              f"runs (benchmark/grids/cub_reference.toml) to RUNS.")


def reference_gaps(frame: pd.DataFrame, reference: str, level: float) -> list[Gap]:
    """Every other method's gap to ``reference`` on each metric both have a value of."""
    check_reference(frame, reference)
    if (frame["n_seeds"] > 1).any() or frame["seed"].isna().any():
        raise ProtobenchError("--reference pairs single runs on their seeds; drop the published CSV (means over "
                              "seeds) from the inputs.")
    metrics = [m for m in GAP_METRICS if m in frame.columns and frame[m].notna().any()]
    refs = frame[frame["method"] == reference]
    gaps: list[Gap] = []
    for (dataset, backbone), cell in frame[frame["method"] != reference].groupby(["dataset", "backbone"], sort=True):
        ref_cell = refs[(refs["dataset"] == dataset) & (refs["backbone"] == backbone)]
        if ref_cell.empty:
            continue
        for (method, J, variant), runs in cell.groupby(["method", "J", "variant"], sort=True, dropna=False):
            ref_runs = _matching_reference(ref_cell, J, variant, reference, f"{dataset}/{backbone}")
            for metric in metrics:
                diff = cell_difference(runs.set_index("seed"), ref_runs.set_index("seed"), metric, level,
                                       names=(str(method), reference))
                if diff is None:
                    continue
                gaps.append(Gap(str(dataset), str(backbone), str(method), int(J), str(variant), metric,
                                diff.difference, diff.ci[0], diff.ci[1], diff.n_seeds, diff.n_images, diff.test))
    if not gaps:
        raise ProtobenchError(f"no method shares a dataset, backbone and seed with reference {reference!r}; run the "
                              f"reference on the same trunks and seeds as the methods it frames.")
    return gaps


def _matching_reference(ref_cell: pd.DataFrame, J: int, variant: object, reference: str, where: str) -> pd.DataFrame:
    """The reference's runs of one trunk: all of them when it was run at one (J, variant), else those of ``J``."""
    settings = ref_cell[["J", "variant"]].astype(str).drop_duplicates()
    if len(settings) == 1:
        return ref_cell
    same = ref_cell[(ref_cell["J"] == J) & (ref_cell["variant"].astype(str) == str(variant))]
    if same["seed"].duplicated().any() or same.empty:
        raise ProtobenchError(f"reference {reference!r} on {where} was run at several settings "
                              f"({', '.join('J=' + s for s in settings['J'])}) and none matches J={J} once per seed; "
                              f"pass one runs directory per reference setting.")
    return same


def render_gaps(gaps: list[Gap], reference: str, fmt: str, level: float, decimals: int = 1) -> str:
    """The gaps as a markdown table with its note, or as CSV (full precision, no formula cell)."""
    frame = pd.DataFrame([asdict(g) for g in gaps]).astype({"n_images": "Int64"})  # an integer or empty
    if fmt == "csv":
        return frame_csv(frame)
    from tabulate import tabulate

    def number(value: float) -> str:
        return "–" if math.isnan(value) else f"{value:+.{decimals}f}"

    rows = [[*map(markdown_cell, (g.dataset, g.backbone, g.method, str(g.J), g.variant, g.metric)), number(g.gap),
             "–" if math.isnan(g.ci_low) else f"[{number(g.ci_low)}, {number(g.ci_high)}]", str(g.n_seeds),
             "–" if g.n_images is None else str(g.n_images), g.test] for g in gaps]
    headers = ["dataset", "backbone", "method", "J", "variant", "metric", f"gap to {reference}",
               f"{100 * level:g}% CI", "seeds", "images", "interval"]
    note = (f"gap = method − {reference} (percent points; mean over the seeds both have, and over the test images "
            f"where per-image records exist); the interval column names the procedure and its n: the crossed seeds × "
            f"images interval where both have per-image records, else paired Student t over the seeds (training "
            f"variance only); docs/guides/statistics.md.")
    return f"Gap to the reference row {reference}:\n\n" + \
        tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True) + "\n\n" + note + "\n"
