"""``protobench plot``: a metric against one dimension, mean over seeds with their spread as error bars.

``--x J --y con --hue method --facet backbone``: one panel per facet value, one line per hue
value, one point per x value. A point is the mean over the seeds of its runs and its error bar
the sample standard deviation (ddof = 1; none for a single seed). As in the pivot tables, a
key dimension that is none of x, hue and facet must take one value (or be fixed with --where),
so a point never pools runs that differ in something the plot does not show.
"""
from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmark.errors import ProtobenchError, did_you_mean
from benchmark.output_file import write_output
from reports.columns import KEY_COLUMNS
from reports.figure_style import EMBEDDED_FONTS, SCREEN, FigureStyle, drawing
from reports.layout import KeyValue
from reports.pivot import METRICS, dimension_label, display_names, fixed_dimensions, ordered_values

FIGURE_FORMATS: tuple[str, ...] = (".png", ".pdf", ".svg")
X_COLUMNS: tuple[str, ...] = (*KEY_COLUMNS, "seed")
PERCENT_METRICS = frozenset({"acc", "con", "sta", "dis", "comp", "purity", "loc", "del", "sanity"})
_PANEL_INCHES = (4.2, 3.2)
#: axis titles of the dimensions
AXIS_NAMES: dict[str, str] = {"dataset": "dataset", "backbone": "backbone", "method": "method",
                              "J": "J (prototypes per class)", "variant": "variant", "seed": "seed"}
_MAX_PANELS_PER_ROW = 4


@dataclass(frozen=True)
class Point:
    """One plotted point: the mean of ``n`` seeds and their sample standard deviation (None if n = 1)."""

    x: KeyValue
    mean: float
    std: float | None
    n: int


@dataclass(frozen=True)
class Series:
    """The points of one hue value in one facet panel."""

    facet: KeyValue | None
    hue: KeyValue | None
    label: str
    points: tuple[Point, ...]


def check_figure_path(out: Path) -> None:
    if out.suffix not in FIGURE_FORMATS:
        raise ProtobenchError(
            f"Cannot draw to {out}: unknown figure type {out.suffix or '(none)'!r}; "
            f"end the name with {', '.join(FIGURE_FORMATS)}."
        )


def result_series(
    frame: pd.DataFrame, *, x: str, y: str, hue: str | None = None, facet: str | None = None
) -> list[Series]:
    """Aggregate ``frame`` (``reports.load``) into the series ``plot_results`` draws."""
    _check_axes(x, y, hue, facet)
    _fixed(frame, x, hue, facet)
    rows = frame.dropna(subset=[y, x])  # x = seed: published means have none
    if rows.empty:
        raise ProtobenchError(f"No result has a value for {y}; plot another metric (--y).")
    names = display_names(frame)
    series = []
    for facet_value in ordered_values(rows, facet):
        in_facet = rows if facet is None else rows[rows[facet] == facet_value]
        for hue_value in ordered_values(in_facet, hue):
            selected = in_facet if hue is None else in_facet[in_facet[hue] == hue_value]
            points = tuple(
                _point(x_value, selected[selected[x] == x_value][y]) for x_value in ordered_values(selected, x)
            )
            label = METRICS[y].header.md if hue is None else dimension_label(hue, hue_value, names).md
            series.append(Series(facet=facet_value, hue=hue_value, label=label, points=points))
    return series


def plot_results(
    frame: pd.DataFrame, out: Path, *, x: str, y: str, hue: str | None = None, facet: str | None = None,
    style: FigureStyle = SCREEN,
) -> list[Series]:
    """Draw the mean ± seed spread of ``y`` against ``x`` to ``out`` (PNG, PDF or SVG); returns the series.

    A numeric x draws lines; a categorical x (method, backbone, …) dots with error bars, the hue
    values side by side at each category. The number of seeds per point is in the title when
    every point has the same, else written next to each point (``style`` paper: no title; the
    caption, :func:`plot_caption`, is for the paper's text)."""
    check_figure_path(out)
    series = result_series(frame, x=x, y=y, hue=hue, facet=facet)
    with drawing(style):
        _draw_results(frame, series, out, x=x, y=y, hue=hue, facet=facet, style=style)
    return series


def plot_caption(frame: pd.DataFrame, series: list[Series], *, x: str, hue: str | None, facet: str | None) -> str:
    """What a figure of ``series`` shows beyond its axes: the fixed keys, the error bars, the n."""
    names = display_names(frame)
    counts = {p.n for s in series for p in s.points}
    # "key = value" held together by no-break spaces when the title wraps
    fixed = [f"{d}\u00a0=\u00a0{dimension_label(d, v, names).md}" for d, v in _fixed(frame, x, hue, facet).items()]
    seeds = [f"n\u00a0=\u00a0{counts.pop()} seed(s) per point"] if len(counts) == 1 else ["n (seeds) marked at each point"]
    return "; ".join([", ".join(fixed), "mean over seeds ± 1 sample s.d.", *seeds] if fixed else
                     ["mean over seeds ± 1 sample s.d.", *seeds])


def _draw_results(frame: pd.DataFrame, series: list[Series], out: Path, *, x: str, y: str, hue: str | None,
                  facet: str | None, style: FigureStyle) -> None:
    names = display_names(frame)
    facets = list(dict.fromkeys(s.facet for s in series))
    hues = ordered_values(frame, hue)  # one colour per hue value in every panel
    fig, axes = panels(len(facets), style)
    colours = [f"C{i % 10}" for i in range(len(hues))]
    categorical = any(isinstance(p.x, str) for s in series for p in s.points)
    ticks = list(dict.fromkeys(p.x for s in series for p in s.points))
    counts = {p.n for s in series for p in s.points}
    gap = min((b - a for a, b in zip(sorted(ticks), sorted(ticks)[1:])), default=1.0) if not categorical else 1.0
    for ax, facet_value in zip(axes, facets):
        for s in (s for s in series if s.facet == facet_value):
            slot = hues.index(s.hue)
            # the hue values side by side at each x (within 0.35 of a category's tick, 0.15 of the
            # gap between numeric x values), so error bars of one x never overlap
            dodge = (slot - (len(hues) - 1) / 2) * min(0.7 / len(hues), 0.3) * (1.0 if categorical else 0.5 * gap)
            xs = [(ticks.index(p.x) if categorical else p.x) + dodge for p in s.points]
            ax.errorbar(
                xs, [p.mean for p in s.points], yerr=[p.std or 0.0 for p in s.points], marker="o", capsize=3,
                linewidth=1.5, linestyle="none" if categorical else "-", label=s.label, color=colours[slot],
            )
            if len(counts) > 1:
                ax.margins(y=0.15)  # room for the labels above the top points
                for px, p in zip(xs, s.points):
                    ax.annotate(f"n={p.n}", (px, p.mean + (p.std or 0.0)), textcoords="offset points",
                                xytext=(0, 3), ha="center", fontsize=style.tiny, color=colours[slot])
        if categorical:
            ax.set_xticks(range(len(ticks)), [dimension_label(x, t, names).md for t in ticks], rotation=30, ha="right")
            ax.set_xlim(-0.5, len(ticks) - 0.5)
        else:  # half a gap of room either side: one x value sits mid-axis, its dodged points off the edges
            ax.set_xlim(min(ticks) - gap / 2, max(ticks) + gap / 2)
            if all(isinstance(t, int) for t in ticks):
                ax.set_xticks(sorted(ticks))
        if facet is not None and style.titles:
            ax.set_title(f"{AXIS_NAMES[facet]} = {dimension_label(facet, facet_value, names).md}", fontsize="medium")
        ax.set_xlabel(AXIS_NAMES[x])
        ax.set_ylabel(METRICS[y].header.md + (" (%)" if y in PERCENT_METRICS else ""))
        ax.grid(alpha=0.3)
    if hue is not None:
        one_legend(fig, axes[0], title=AXIS_NAMES[hue], style=style)
    if style.titles:
        title = plot_caption(frame, series, x=x, hue=hue, facet=facet)
        # wrapped to the figure's width (about 11 characters per inch at the small font)
        fig.suptitle(textwrap.fill(title, width=int(fig.get_figwidth() * 11)), fontsize="small")
    elif facet is not None:  # the panels' facet values, in the panels' order, below them
        for ax, facet_value in zip(axes, facets):
            ax.text(0.5, 1.02, dimension_label(facet, facet_value, names).md, transform=ax.transAxes,
                    ha="center", va="bottom")
    save_figure(fig, out)


def one_legend(fig, ax, *, title: str | None = None, style: FigureStyle = SCREEN) -> None:  # (Figure, Axes)
    """One legend for the whole figure, below the panels (never over a panel's ticks or the title)."""
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for other in fig.axes:
        for handle, label in zip(*other.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    columns = 4 if style.column_inches is None or len(fig.axes) > 1 else 2  # a column-wide figure: 2 a row
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncols=min(len(seen), columns),
               fontsize=style.small, title=title, title_fontsize=style.small)


def panels(count: int, style: FigureStyle = SCREEN):  # -> tuple[Figure, list[Axes]]
    """A figure of ``count`` equal panels, at most four per row (Agg backend: no display needed);
    ``style`` paper: one column wide for one panel, else the text width, panels 4:3."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = min(count, _MAX_PANELS_PER_ROW)
    nrows = math.ceil(count / ncols)
    width = style.width(ncols)
    size = ((_PANEL_INCHES[0] * ncols, _PANEL_INCHES[1] * nrows) if width is None else
            (width, width / ncols * 0.75 * nrows + 0.5))  # + room for the legend below
    fig, grid = plt.subplots(
        nrows, ncols, figsize=size, squeeze=False,
        layout="constrained",  # room for the suptitle and a legend outside the panels
    )
    axes = [ax for row in grid for ax in row]
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def save_figure(fig, out: Path) -> None:
    """Render to memory, then write atomically (no half-written figure); closes ``fig``. PDFs embed
    TrueType (Type 42) fonts, never Type 3 (``reports.figure_style``)."""
    import matplotlib
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        with matplotlib.rc_context(EMBEDDED_FONTS):
            fig.savefig(buffer, format=out.suffix[1:], dpi=200)
    finally:
        plt.close(fig)
    write_output(out, buffer.getvalue())


def _check_axes(x: str, y: str, hue: str | None, facet: str | None) -> None:
    if x not in X_COLUMNS:
        raise ProtobenchError(f"--x {x}: choose one of {', '.join(X_COLUMNS)}.")
    if y not in METRICS:
        raise ProtobenchError(f"--y {y}: unknown metric{did_you_mean(y, METRICS)}; choose one of {', '.join(METRICS)}.")
    for option, dim in (("--hue", hue), ("--facet", facet)):
        if dim is not None and dim not in KEY_COLUMNS:
            raise ProtobenchError(f"{option} {dim}: choose one of {', '.join(KEY_COLUMNS)}.")
    used = [d for d in (x, hue, facet) if d is not None]
    if len(set(used)) != len(used):
        raise ProtobenchError(f"--x, --hue and --facet must differ, got {', '.join(used)}.")


def _fixed(frame: pd.DataFrame, x: str, hue: str | None, facet: str | None) -> dict[str, KeyValue]:
    """The key dimensions the plot does not show, each with its one value (else an error)."""
    return fixed_dimensions(frame, [d for d in KEY_COLUMNS if d not in (x, hue, facet)], hint="--hue or --facet")


def _point(x: KeyValue, values: pd.Series) -> Point:
    n = len(values)
    # sample standard deviation over seeds (ddof = 1), the spread the tables print as ±std
    return Point(x=x, mean=float(values.mean()), std=float(values.std(ddof=1)) if n > 1 else None, n=n)
