"""Text of one table cell in the formats the reports write: the markdown rule of
benchmark/escaping.py (one rule per output format), re-exported where the reports import it."""
from __future__ import annotations

from benchmark.escaping import markdown_cell

__all__ = ["markdown_cell"]
