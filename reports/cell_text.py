"""Text of one table cell in the formats the reports write."""
from __future__ import annotations


def markdown_cell(cell: str) -> str:
    """A table cell with ``|`` escaped (GitHub-flavoured markdown), so a label holding one (an
    adapter's display_name) cannot split its row."""
    return cell.replace("|", r"\|")
