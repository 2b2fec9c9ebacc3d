"""Best / second-best marks of one column, decided on the shown (rounded) values, and the marks
as every format typesets them (markdown and LaTeX mark the same cells: :func:`typeset_marks`).

Dense ranking: every cell equal to the best shown value is "best" (ties share the mark),
every cell equal to the next distinct shown value is "second". Missing cells get no mark.
"""
from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from reports.layout import Layout
    from reports.table import RowView

Mark = Literal["best", "second", "tied"] | None  # "tied": report --significance (reports.significance)


def rank_marks(shown: Sequence[Decimal | None], *, higher_is_better: bool) -> list[Mark]:
    """The mark of each cell of a column, given the values it displays."""
    distinct = sorted({v for v in shown if v is not None}, reverse=higher_is_better)
    ranks: dict[Decimal, Mark] = dict(zip(distinct, ("best", "second")))
    return [None if v is None else ranks.get(v) for v in shown]


def typeset_marks(layout: Layout, rows: Sequence[RowView]) -> list[list[Mark]]:
    """Each cell's mark as every format sets it: "best" only where one cell of its column is best
    (a tied best is plain), and with significance marks the column's reference cell (every ≈ is "not
    different from it") is bold when it alone is best, else plain, never ≈ (docs/guides/reports.md)."""
    metrics = [m for g in layout.columns for m in g.metrics]
    typeset: list[list[Mark]] = [[c.mark for c in row.cells] for row in rows]
    for c, metric in enumerate(metrics):
        column = [row.cells[c] for row in rows]
        best = [r for r, cell in enumerate(column) if cell.mark == "best"]
        if len(best) > 1:
            for r in best:
                typeset[r][c] = None
        tied = [r for r, cell in enumerate(column) if cell.mark == "tied" and cell.stat is not None]
        if tied and not best:
            sign = 1.0 if metric.higher_is_better else -1.0
            reference = max(tied, key=lambda r: sign * column[r].stat.mean)
            typeset[reference][c] = None
    return typeset
