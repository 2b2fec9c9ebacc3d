"""The format-independent view of a rendered table: shown strings, marks, daggers, gaps.

``build_table`` does everything the LaTeX and markdown writers share (aggregation,
rounding, best/second-best, daggers, comparison, the list of missing cells); the writers
only spell the result in their syntax.

Daggers: in a layout without ±std, a cell averaging two or more seeds is a "multi-seed"
cell. A row whose every present cell is multi-seed gets one † on its label (the paper's
``NPPP$^\\dagger$``); otherwise each multi-seed cell carries its own †.
"""
from __future__ import annotations

import re

from dataclasses import dataclass

import pandas as pd

from reports.aggregate import Stat, cell_stats
from reports.columns import KEY_COLUMNS, REFERENCE_ROWS
from reports.compare import Reference, reference
from reports.layout import BEST_NOTE, ColumnGroup, Heading, Layout, Metric, Row, Rule, Text
from reports.marks import Mark, rank_marks
from reports.numbers import format_number, shown_value


@dataclass(frozen=True)
class CellView:
    """One value cell. ``value`` None means missing; ``reference`` is set when comparing.

    ``std`` (the seeds' spread, or a published one) and ``n`` (seeds averaged; 0 when missing)
    are always filled in; the writers show them where the layout asks (``show_std``, ``show_n``).
    """

    value: str | None
    std: str | None
    mark: Mark
    dagger: bool
    reference: Reference | None
    n: int = 0
    ci: tuple[str, str] | None = None  # report --ci: (lo, hi) as shown (reports.intervals' one policy)
    stat: Stat | None = None  # the unrounded statistic (report --format csv writes it to read back)


@dataclass(frozen=True)
class RowView:
    """One body row: label cells (the dagger goes after the first label, before the qualifier)."""

    labels: tuple[Text, ...]
    qualifier: Text | None
    dagger: bool
    cells: tuple[CellView, ...]


@dataclass(frozen=True)
class HeaderCell:
    """One header cell spanning ``span`` columns (group labels span their metrics)."""

    text: Text
    span: int = 1
    bold: bool = False


BodyView = RowView | Heading | Rule


@dataclass(frozen=True)
class TableView:
    """Everything a writer needs: header rows, body items, and the cells left empty."""

    layout: Layout
    header: tuple[tuple[HeaderCell, ...], ...]
    body: tuple[BodyView, ...]
    missing: tuple[str, ...]
    has_dagger: bool
    comparing: bool
    interval_note: str | None = None  # report --ci: the methods, level and seeds of the intervals
    significance_note: str | None = None  # report --significance: what bold and ≈ mean


def build_table(
    frame: pd.DataFrame, layout: Layout, *, decimals: int, against: pd.DataFrame | None = None,
    level: float | None = None, significance: float | None = None,
) -> TableView:
    """Aggregate ``frame`` into ``layout`` and decide every shown string and mark (``level``:
    with confidence intervals at that level; ``significance``: marks by paired tests at that
    alpha instead of by rank, ``reports.significance``)."""
    columns = [(group, metric) for group in layout.columns for metric in group.metrics]
    ours = cell_stats(frame, layout, level=level)
    published = cell_stats(against, layout) if against is not None else None
    keys = [[(layout.cell_key(row, g), m.key) for g, m in columns] for row in layout.rows]
    stats = [[ours.get(key) for key in line] for line in keys]
    digits = [decimals if m.decimals is None else m.decimals for _, m in columns]
    shown = [[None if s is None else format_number(s.mean, digits[c]) for c, s in enumerate(line)] for line in stats]
    # a reference row (linear probe, k-NN) frames the methods: never marked, nor the best they are marked against
    framing = [bool(line) and line[0][0][KEY_COLUMNS.index("method")] in REFERENCE_ROWS for line in keys]
    ranked = [[None if ref else s for s in line] for line, ref in zip(stats, framing)]
    if significance is not None and layout.mark_best:
        from reports.significance import significance_marks

        marks = [significance_marks(frame, [line[c][0] for line in keys],
                                    [None if line[c] is None else line[c].mean for line in ranked], metric.key,
                                    higher_is_better=metric.higher_is_better, alpha=significance)
                 for c, (_, metric) in enumerate(columns)]
    elif level is not None:  # with intervals, no best/second-best from means alone (--significance tests them)
        marks = [[None] * len(keys) for _ in columns]
    else:
        marks = _marks(layout, columns, [[None if ref else s for s in line] for line, ref in zip(shown, framing)])

    body: list[BodyView] = []
    missing: list[str] = []
    context: list[str] = []
    row_index = iter(range(len(keys)))
    for item in layout.body:
        if isinstance(item, Heading):
            context[item.level :] = [item.text.md]
        if not isinstance(item, Row):
            body.append(item)
            continue
        r = next(row_index)
        row_dagger, cell_daggers = _daggers(layout, stats[r])
        cells = tuple(
            CellView(
                value=shown[r][c],
                std=_std(stats[r][c], digits[c]),
                mark=marks[c][r],
                dagger=cell_daggers[c],
                reference=None
                if published is None
                else reference(shown[r][c], published.get(keys[r][c]), digits[c]),
                n=0 if stats[r][c] is None else stats[r][c].n,
                ci=_interval(stats[r][c], digits[c]),
                stat=stats[r][c],
            )
            for c in range(len(columns))
        )
        missing.extend(
            f"{' / '.join([*context, row_name(item)])} | {column_name(group, metric)}"
            for (group, metric), cell in zip(columns, cells)
            if cell.value is None
        )
        body.append(RowView(labels=item.labels, qualifier=item.qualifier, dagger=row_dagger, cells=cells))

    return TableView(
        layout=layout,
        header=_header(layout),
        body=tuple(body),
        missing=tuple(missing),
        has_dagger=any(isinstance(v, RowView) and (v.dagger or any(c.dagger for c in v.cells)) for v in body),
        comparing=published is not None,
        interval_note=None if level is None else interval_note(frame, level, [s for line in stats for s in line]),
        significance_note=None if significance is None or not layout.mark_best else significance_note(significance),
    )


#: BEST_NOTE in either spelling, any scope: the caption sentence ``--significance`` replaces
_BEST_MARKS_SENTENCE = re.compile("|".join(
    re.escape(note).replace(re.escape("{scope}"), r"[^.]*") + r"\s*" for note in (BEST_NOTE.md, BEST_NOTE.tex)))


def caption_text(caption: str, table: TableView) -> str:
    """A layout's caption as a table shows it: with significance marks or intervals, its
    best/second-best sentence goes (no cell is underlined then; the legends say what is marked)."""
    marked_by_rank = table.significance_note is None and table.interval_note is None
    return caption if marked_by_rank else _BEST_MARKS_SENTENCE.sub("", caption).rstrip()


def significance_note(alpha: float) -> str:
    """The legend of ``report --significance``: which test, which level."""
    from reports.stats import MIN_DISCORDANT, MIN_IMAGES

    return (f"With significance marks: bold = best and significantly better than the runner-up; ≈ = not significantly different "
            f"from the best, or not testable (a published mean; no common seed; one seed of a metric without per-image "
            f"values; fewer than {MIN_IMAGES} test images). Tests, paired on seed and on test image (by id): metrics "
            f"with per-image records (acc, sta, dis, comp): the two-way seeds × images test (n = seeds × images; one "
            f"seed: Student t over the images, training variance not covered; fewer than {MIN_DISCORDANT} images "
            f"where the methods differ: exact sign-flip test), else (con, or runs without records) paired Student t "
            f"over the n seeds (training variance only); Holm-corrected within each column, α = {alpha:g}.")


#: after an interval clipped to the metric's range (markdown/CSV; LaTeX: ``\\ddag``)
CLIPPED_MARK = "‡"


def _interval(stat: Stat | None, decimals: int) -> tuple[str, str] | None:
    interval = None if stat is None else stat.ci
    if interval is None:
        return None
    return format_number(interval[0], decimals), format_number(interval[1], decimals)


def interval_text(cell: CellView, clipped_mark: str = CLIPPED_MARK) -> str:
    """What ``report --ci`` appends to a present cell: `` [lo, hi]`` (followed by ``clipped_mark``
    where clipped to the metric's range), ``[deterministic]`` before it for a cell whose seeds gave
    one result, or why there is no interval: ``[n=1]`` (one value, no per-image records), ``[no
    spread]`` (every seed equal), ``[published]`` (a published mean), ``[no interval: why]``
    (otherwise: the procedure gives none, e.g. under 30 images)."""
    stat = cell.stat
    shown = " [deterministic]" if stat is not None and stat.deterministic else ""
    if cell.ci:
        return shown + f" [{cell.ci[0]}, {cell.ci[1]}]" + (clipped_mark if stat is not None and stat.ci_clipped else "")
    if stat is not None and stat.deterministic:  # one result without per-image values: nothing to add
        return shown
    if stat is not None and stat.ci_missing == "no interval" and stat.ci_note:
        return shown + f" [no interval: {stat.ci_note}]"
    return shown + f" [{stat.ci_missing if stat is not None and stat.ci_missing else 'n=1'}]"


def interval_note(frame: pd.DataFrame, level: float, cells: list[Stat | None] = ()) -> str:
    """What the intervals of ``report --ci`` are: the one policy (``reports.intervals``), its level,
    the seeds, and each procedure the table's cells used with its n (``cells``: the statistics)."""
    from reports.intervals import DETERMINISTIC
    from reports.stats import CROSSED_METHOD, SEED_METHOD

    seeds = sorted({int(s) for s in frame["seed"].dropna()})
    procedures = sorted({s.ci_note for s in cells if s is not None and s.ci is not None and s.ci_note})
    used = f" Used here: {'; '.join(procedures)}." if procedures else ""
    return (f"[lo, hi]: {100 * level:g}% interval of each cell (seeds {', '.join(map(str, seeds)) or 'none'}): the "
            f"{CROSSED_METHOD} over seeds × test images where every run of the cell has per-image records of the "
            f"metric (the procedure compare gives differences), else the {SEED_METHOD}. [deterministic]: "
            f"{DETERMINISTIC} (every per-image value of the trained model equal across seeds), n = 1 distinct result, the interval over "
            f"its test images only. [n=1]: one value without per-image records; [no spread]: every seed equal; "
            f"[published]: a published mean; [no interval: why]: the procedure gives none.{used} {CLIPPED_MARK}: clipped to the metric's range. --ci draws no "
            f"best/second-best marks from means alone (--significance draws tested ones).")


def _marks(
    layout: Layout, columns: list[tuple[ColumnGroup, Metric]], shown: list[list[str | None]]
) -> list[list[Mark]]:
    """Per column, the mark of each row (all None when the layout marks nothing, and in a table
    with fewer than two rows of values: one row is not the best of anything; a lone value in a
    column of a larger table keeps its mark, as the paper's tables set it)."""
    marks: list[list[Mark]] = []
    compared = sum(any(cell is not None for cell in line) for line in shown) >= 2
    for c, (_, metric) in enumerate(columns):
        values = [None if line[c] is None else shown_value(line[c]) for line in shown]
        if layout.mark_best and compared:
            marks.append(rank_marks(values, higher_is_better=metric.higher_is_better))
        else:
            marks.append([None] * len(values))
    return marks


def _std(stat: Stat | None, decimals: int) -> str | None:
    if stat is None or stat.std is None:
        return None
    return format_number(stat.std, decimals)


def _daggers(layout: Layout, stats: list[Stat | None]) -> tuple[bool, list[bool]]:
    """(† on the row label, † on each cell) for one row; none where ±std is shown."""
    multi = [s is not None and s.n > 1 and not layout.show_std for s in stats]
    present = [s is not None for s in stats]
    row_dagger = any(present) and all(m for m, p in zip(multi, present) if p)
    return row_dagger, [m and not row_dagger for m in multi]


def row_name(row: Row) -> str:
    """``vMFProto (J=5)``: the row's labels and qualifier as plain text (messages, CSV headers)."""
    return " / ".join(label.md for label in row.labels) + (row.qualifier.md if row.qualifier else "")


def column_name(group: ColumnGroup, metric: Metric) -> str:
    """``DINOv2 ViT-B/14 / Con.``: the column's group and metric as plain text."""
    return f"{group.label.md} / {metric.header.md}" if group.label else metric.header.md


def _header(layout: Layout) -> tuple[tuple[HeaderCell, ...], ...]:
    """One header row, or a group row (spanning, bold) above a metric row, as in the paper."""
    labels = tuple(HeaderCell(h) for h in layout.label_headers)
    if all(len(g.metrics) == 1 for g in layout.columns):
        return (labels + tuple(HeaderCell(g.label or g.metrics[0].header) for g in layout.columns),)
    metric_row = labels + tuple(HeaderCell(m.header) for g in layout.columns for m in g.metrics)
    if not any(g.label for g in layout.columns):
        return (metric_row,)
    blank = Text("", "")
    group_row = tuple(HeaderCell(blank) for _ in layout.label_headers) + tuple(
        HeaderCell(g.label or blank, span=len(g.metrics), bold=g.label is not None) for g in layout.columns
    )
    return (group_row, metric_row)
