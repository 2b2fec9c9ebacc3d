"""Side-by-side comparison with published numbers (``--against PAPER.csv``).

Each cell then shows our value, the published value and the difference of the two shown
values, ``77.1 (77.7, -0.6)``; the renderers typeset the minus sign for their format.
"""
from __future__ import annotations

from dataclasses import dataclass

from reports.aggregate import Stat
from reports.numbers import format_difference, format_number


@dataclass(frozen=True)
class Reference:
    """The published value of a cell as shown, and ours minus it (None where either is absent)."""

    value: str | None
    difference: str | None


def reference(ours: str | None, published: Stat | None, decimals: int) -> Reference:
    """The comparison part of one cell, given our shown value and the published statistic."""
    if published is None:
        return Reference(value=None, difference=None)
    theirs = format_number(published.mean, decimals)
    return Reference(value=theirs, difference=None if ours is None else format_difference(ours, theirs))
