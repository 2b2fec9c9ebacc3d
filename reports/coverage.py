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
        key = tuple(v if isinstance(v, str) else int(v) for v in row)
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
