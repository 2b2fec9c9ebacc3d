"""The one CSV writer of every CSV the suite writes (``report --format csv``, ``export``,
``export --per-image``, ``compare --format csv``, per-image records without pyarrow): no cell a
spreadsheet would run as a formula.

OWASP's rule for CSV injection (https://owasp.org/www-community/attacks/CSV_Injection): a cell
that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is prefixed with a single
quote, so a spreadsheet shows it as text. A number stays a number: a cell that is a plain
decimal numeral (``-1.5``, ``+3``, ``-2e-05``) is left as it is, and numeric columns are
written as numbers whatever their sign.
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: first characters a spreadsheet reads as the start of a formula (OWASP)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMERAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def is_formula_cell(text: str) -> bool:
    """Whether a spreadsheet could run ``text`` as a formula: it starts with one of
    :data:`FORMULA_STARTS` and is not a plain decimal numeral."""
    return text.startswith(FORMULA_STARTS) and _NUMERAL.fullmatch(text) is None


def safe_cell(value: Any) -> Any:
    """``value`` with a single quote in front when it is text a spreadsheet would run."""
    return "'" + value if isinstance(value, str) and is_formula_cell(value) else value


def csv_text(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """The CSV of ``header`` and ``rows`` (``\\n`` line ends), every cell through :func:`safe_cell`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([safe_cell(cell) for cell in header])
    writer.writerows([safe_cell(cell) for cell in row] for row in rows)
    return out.getvalue()


def safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its column names and its text cells through :func:`safe_cell` (numeric
    columns untouched), ready for ``DataFrame.to_csv``."""
    cleaned = frame.rename(columns=lambda name: safe_cell(str(name)))
    for column in _text_columns(cleaned):
        cleaned[column] = cleaned[column].map(safe_cell)
    return cleaned


def _text_columns(frame: pd.DataFrame) -> list[Any]:
    """The columns that may hold text (object or string dtype; numbers and booleans are not)."""
    return [column for column, dtype in zip(frame.columns, frame.dtypes) if dtype == object or str(dtype) in ("string", "str")]


def restore_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame the suite wrote with :func:`frame_csv` and read back: the quote :func:`safe_cell`
    put in front of a text cell taken off again (the suite's own records, e.g. an image path)."""
    restored = frame.copy()
    for column in _text_columns(restored):
        restored[column] = restored[column].map(
            lambda v: v[1:] if isinstance(v, str) and v.startswith("'") and is_formula_cell(v[1:]) else v)
    return restored


def frame_csv(frame: pd.DataFrame, **to_csv: Any) -> Any:
    """``frame.to_csv(index=False, lineterminator="\\n", **to_csv)`` of :func:`safe_frame`."""
    return safe_frame(frame).to_csv(index=False, lineterminator="\n", **to_csv)
