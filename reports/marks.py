"""Best / second-best marks of one column, decided on the shown (rounded) values.

Dense ranking: every cell equal to the best shown value is "best" (ties share the mark),
every cell equal to the next distinct shown value is "second". Missing cells get no mark.
"""
from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Literal

Mark = Literal["best", "second", "tied"] | None  # "tied": report --significance (reports.significance)


def rank_marks(shown: Sequence[Decimal | None], *, higher_is_better: bool) -> list[Mark]:
    """The mark of each cell of a column, given the values it displays."""
    distinct = sorted({v for v in shown if v is not None}, reverse=higher_is_better)
    ranks: dict[Decimal, Mark] = dict(zip(distinct, ("best", "second")))
    return [None if v is None else ranks.get(v) for v in shown]
