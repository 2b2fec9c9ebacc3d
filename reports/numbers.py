"""How numbers are shown: fixed decimals, and signed differences of shown numbers.

Marks and differences are computed on the shown (rounded) numbers, parsed back exactly
with ``Decimal``, so they always agree with what a reader sees in the table.
"""
from __future__ import annotations

from decimal import Decimal


def format_number(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` digits after the point; never ``-0.0``."""
    shown = f"{value:.{decimals}f}"
    return shown[1:] if shown.startswith("-") and Decimal(shown) == 0 else shown


def shown_value(shown: str) -> Decimal:
    """The exact number a formatted cell displays."""
    return Decimal(shown)


def format_difference(ours: str, theirs: str) -> str:
    """``ours − theirs`` of two shown numbers, signed (``+0.4``, ``-0.6``; zero unsigned)."""
    difference = shown_value(ours) - shown_value(theirs)
    return f"{difference:+}" if difference != 0 else f"{abs(difference)}"
