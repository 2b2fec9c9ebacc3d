"""Which results a paper layout leaves out, and why: per key column, the values it never selects."""
from __future__ import annotations

from collections import Counter, defaultdict

import pandas as pd

from reports.columns import KEY_COLUMNS
from reports.layout import KeyValue, Layout

_SHOWN_VALUES = 3
COMBINATION = "combination"


ValueSets = dict[str, set[KeyValue]]


def left_out(frame: pd.DataFrame, layout: Layout) -> tuple[Counter[str], ValueSets, ValueSets]:
    """(results left out per reason, the values left out per reason, the values the layout uses per column).

    A result's reason is the first key column (dataset, backbone, method, J, variant) whose value
    no cell of the layout selects; ``"combination"`` when every value is used but not together.
    """
    keys = {layout.cell_key(row, group) for row in layout.rows for group in layout.columns}
    used = {column: {key[i] for key in keys} for i, column in enumerate(KEY_COLUMNS)}
    counts: Counter[str] = Counter()
    values: dict[str, set[KeyValue]] = defaultdict(set)
    for row in frame[list(KEY_COLUMNS)].itertuples(index=False):
        key = _key(tuple(row))
        if key in keys:
            continue
        column = next((c for c, v in zip(KEY_COLUMNS, key) if v not in used[c]), COMBINATION)
        counts[column] += 1
        if column != COMBINATION:
            values[column].add(key[KEY_COLUMNS.index(column)])
    return counts, dict(values), used


def left_out_message(frame: pd.DataFrame, layout: Layout) -> str | None:
    """One line for stderr, e.g. ``cub_main: 4 results not in this layout (dataset synthbirds ≠ cub) — …``."""
    counts, values, used = left_out(frame, layout)
    if not counts:
        return None
    reasons = [
        (_reason(column, values.get(column, set()), used.get(column, set())), n) for column, n in counts.most_common()
    ]
    parts = [reason if len(reasons) == 1 else f"{n}× {reason}" for reason, n in reasons]
    total = sum(counts.values())
    return (
        f"{layout.name}: {total} result{'s' if total != 1 else ''} not in this layout ({'; '.join(parts)}) — "
        f"try `protobench report RUNS` without --layout"
    )


def missing_reasons(frame: pd.DataFrame, layout: Layout) -> Counter[str]:
    """Why each empty cell of ``layout`` is empty, counted per reason: the first key column whose
    value no result has (``no result has dataset cub``), else ``no result has this combination``,
    else the metric the matching results lack (``the results have no sta``)."""
    groups = {_key(values): rows for values, rows in frame.groupby(list(KEY_COLUMNS))}
    present = {column: {key[i] for key in groups} for i, column in enumerate(KEY_COLUMNS)}
    absent: dict[str, set[KeyValue]] = defaultdict(set)
    cells: Counter[str] = Counter()
    for row in layout.rows:
        for group in layout.columns:
            key = layout.cell_key(row, group)
            column = next((c for c, v in zip(KEY_COLUMNS, key) if v not in present[c]), None)
            matching = groups.get(key)
            for metric in group.metrics:
                if column is not None:
                    absent[column].add(key[KEY_COLUMNS.index(column)])
                    cells[column] += 1
                elif matching is None:
                    cells[COMBINATION] += 1
                elif not matching[metric.key].notna().any():
                    cells[f"the results have no {metric.key}"] += 1
    return Counter({(_absent_reason(c, absent[c]) if c in KEY_COLUMNS else
                     "no result has this combination" if c == COMBINATION else c): n for c, n in cells.items()})


def _absent_reason(column: str, values: set[KeyValue]) -> str:
    return f"no result has {column} {_listing(values)}"


def _key(values: tuple[object, ...]) -> tuple[KeyValue, ...]:
    """A (dataset, backbone, method, J, variant) tuple as a Layout's cell_key spells it."""
    return tuple(v if isinstance(v, str) else int(v) for v in values)  # type: ignore[call-overload]


def _reason(column: str, left: set[KeyValue], used: set[KeyValue]) -> str:
    if column == COMBINATION:
        return "a combination of values no cell shows"
    shown = _listing(left)
    if len(used) == 1:
        return f"{column} {shown} ≠ {next(iter(used))}"
    return f"{column} {shown} not in {{{_listing(used)}}}"


def _listing(values: set[KeyValue]) -> str:
    ordered = sorted(values, key=str)
    more = len(ordered) - _SHOWN_VALUES
    return ", ".join(str(v) for v in ordered[:_SHOWN_VALUES]) + (f", … ({more} more)" if more > 0 else "")
