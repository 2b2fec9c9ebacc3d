"""``protobench plot --cd``: a critical-difference diagram (Demšar, JMLR 2006) across blocks.

Treatments are the values of one key (``--hue``, default method); a block is every other key
(dataset, backbone, J, variant) held fixed, and its value for a treatment the mean over that
cell's seeds. Only blocks where every treatment has a value count. Per block the treatments
are ranked (1 = best, ties share the mean rank: ``scipy.stats.rankdata``); the diagram shows
each treatment's mean rank. The omnibus test is Friedman's (``scipy.stats.friedmanchisquare``,
three treatments or more); the post-hoc test is the pairwise Wilcoxon signed-rank test over
blocks with Holm's correction, as Benavoli et al. (JMLR 2016) recommend instead of mean-rank
tests. A bar joins treatments no pair of which differs significantly.
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from benchmark.errors import ProtobenchError
from reports.columns import KEY_COLUMNS
from reports.pivot import METRICS, dimension_label, display_names, method_labels
from reports.figure_style import SCREEN, FigureStyle, drawing
from reports.plots import check_figure_path, panels, save_figure
from reports.stats import holm, wilcoxon_p


CLIQUE_COLOUR = "0.55"  # mid grey: distinct from the black rank axis in colour and in greyscale


@dataclass(frozen=True)
class CriticalDifference:
    """Treatments in mean-rank order (best first), the tests, and the bars of the diagram."""

    treatments: list[str]
    mean_ranks: list[float]
    friedman_p: float | None  # None with two treatments (the Wilcoxon test alone decides)
    p_holm: dict[tuple[int, int], float]  # (i, j), i < j in the order above
    cliques: list[tuple[int, int]]  # first and last treatment of each bar (inclusive)
    n_blocks: int
    incomplete_blocks: int
    alpha: float


def block_table(frame: pd.DataFrame, metric: str, treatment: str) -> tuple[pd.DataFrame, int]:
    """Blocks × treatments of seed means, complete blocks only; and how many were left out."""
    others = [k for k in KEY_COLUMNS if k != treatment]
    means = frame.groupby([*others, treatment], dropna=False)[metric].mean().unstack(treatment)
    complete = means.dropna()
    return complete, len(means) - len(complete)


def critical_difference(frame: pd.DataFrame, metric: str, *, treatment: str = "method",
                        alpha: float = 0.05) -> CriticalDifference:
    if treatment not in KEY_COLUMNS:
        raise ProtobenchError(f"--hue {treatment}: the treatments of --cd are the values of one of {', '.join(KEY_COLUMNS)}.")
    table, incomplete = block_table(frame, metric, treatment)
    if table.shape[1] < 2 or len(table) < 2:
        raise ProtobenchError(
            f"--cd needs at least two values of {treatment} measured on at least two common blocks (the other keys "
            f"{', '.join(k for k in KEY_COLUMNS if k != treatment)} held fixed); the results give {table.shape[1]} "
            f"value(s) on {len(table)} complete block(s) ({incomplete} block(s) lack {metric} for some value).")
    sign = -1.0 if METRICS[metric].higher_is_better else 1.0
    ranks = np.apply_along_axis(stats.rankdata, 1, sign * table.to_numpy())  # rank 1 = best in each block
    order = np.argsort(ranks.mean(axis=0), kind="stable")
    values = table.to_numpy()[:, order]
    k = len(order)
    friedman = float(stats.friedmanchisquare(*values.T).pvalue) if k >= 3 else None
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    adjusted = holm([wilcoxon_p(values[:, i], values[:, j]) for i, j in pairs])
    p_holm = dict(zip(pairs, adjusted))
    return CriticalDifference(
        treatments=[str(table.columns[i]) for i in order], mean_ranks=ranks.mean(axis=0)[order].tolist(),
        friedman_p=friedman, p_holm=p_holm, cliques=_cliques(k, p_holm, alpha), n_blocks=len(table),
        incomplete_blocks=incomplete, alpha=alpha)


def _cliques(k: int, p_holm: dict[tuple[int, int], float], alpha: float) -> list[tuple[int, int]]:
    """Maximal runs i..j of consecutive treatments (in rank order) with no significant pair."""
    def tied(i: int, j: int) -> bool:
        return all(not p_holm[(a, b)] < alpha for a in range(i, j + 1) for b in range(a + 1, j + 1))

    runs = []
    for i in range(k):
        j = i
        while j + 1 < k and tied(i, j + 1):
            j += 1
        if j > i and not any(a <= i and j <= b for a, b in runs):
            runs.append((i, j))
    return runs


def plot_cd(frame: pd.DataFrame, out: Path, *, metric: str, treatment: str = "method",
            alpha: float = 0.05, style: FigureStyle = SCREEN) -> CriticalDifference:
    """Draw the critical-difference diagram of ``metric`` to ``out``; returns its numbers.

    The rank axis is a thin black line with ticks; each clique bar is a thick grey bar below it,
    clear of the axis, so a bar is never read as part of the scale."""
    check_figure_path(out)
    cd = critical_difference(frame, metric, treatment=treatment, alpha=alpha)
    with drawing(style):
        _draw(frame, cd, out, metric=metric, treatment=treatment, style=style)
    return cd


def cd_caption(cd: CriticalDifference, metric: str, treatment: str) -> str:
    """What the diagram shows: the ranks, the blocks, the tests behind its bars."""
    friedman = "" if cd.friedman_p is None else f"Friedman p = {cd.friedman_p:.3g}; "
    return (f"{METRICS[metric].header.md}: mean rank of each {treatment} over {cd.n_blocks} blocks (1 = best); "
            f"{friedman}bars: no pair differs (Wilcoxon signed-rank, Holm, α = {cd.alpha:g}). Blocks are cells "
            f"averaged over seeds: neither seed nor test-image variance within a block enters these tests")


def treatment_labels(frame: pd.DataFrame, cd: CriticalDifference, treatment: str) -> list[str]:
    """The diagram's label of each treatment, as the tables name it; methods whose display names
    collide are told apart by :func:`reports.pivot.method_labels`."""
    if treatment == "method":
        unique = method_labels(frame)
        return [unique[t] for t in cd.treatments]
    names = display_names(frame)
    return [dimension_label(treatment, _typed(frame, treatment, t), names).md for t in cd.treatments]


def _draw(frame: pd.DataFrame, cd: CriticalDifference, out: Path, *, metric: str, treatment: str,
          style: FigureStyle) -> None:
    labels = treatment_labels(frame, cd, treatment)
    k = len(labels)
    half = math.ceil(k / 2)
    bars_depth = 0.35 + 0.2 * len(cd.cliques)  # the bars lie between the axis and the labels
    lowest = -(bars_depth + 0.5 * half)
    fig, (ax,) = panels(1, style)
    fig.set_size_inches(style.column_inches or 7.0, (0.7 if style.column_inches else 1.2) + 0.35 * half)
    ax.set_xlim(0.5, k + 0.5)
    ax.set_ylim(lowest - 0.2, 0.6)
    ax.axis("off")
    ax.hlines(0, 1, k, color="black", linewidth=1)
    for r in range(1, k + 1):
        ax.vlines(r, 0, 0.12, color="black", linewidth=1)
        ax.text(r, 0.18, str(r), ha="center", va="bottom", fontsize=style.small)
    for index, (label, rank) in enumerate(zip(labels, cd.mean_ranks)):
        depth = -(bars_depth + 0.5 * (index + 1 if index < half else k - index))
        edge, align = (0.5, "left") if index < half else (k + 0.5, "right")
        ax.plot([rank, rank, edge], [0, depth, depth], color="black", linewidth=0.8)
        ax.text(edge, depth + 0.05, f"{label} ({rank:.2f})", ha=align, va="bottom", fontsize=style.small)
    for level, (i, j) in enumerate(cd.cliques):  # grey, thick, round-ended, clear of the black axis
        y = -0.3 - 0.2 * level
        ax.hlines(y, cd.mean_ranks[i] - 0.05, cd.mean_ranks[j] + 0.05, color=CLIQUE_COLOUR, linewidth=4,
                  capstyle="round")
    if style.titles:
        title = cd_caption(cd, metric, treatment)
        ax.set_title(textwrap.fill(title, width=int(fig.get_figwidth() * 11)), fontsize="small")
    save_figure(fig, out)


def _typed(frame: pd.DataFrame, column: str, text: str) -> object:
    """The frame's value of ``column`` whose text is ``text`` (J is an integer)."""
    return next(v for v in frame[column].dropna().unique() if str(v) == text)
