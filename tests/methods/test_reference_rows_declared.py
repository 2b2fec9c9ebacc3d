"""The reports' list of reference rows (reports/columns.py, read without declarations) is the
methods whose declaration sets ``reference_row``."""
from methods.registry import BUILTIN_METHODS, declaration
from reports.columns import REFERENCE_ROWS


def test_the_reports_reference_rows_are_the_declared_ones() -> None:
    assert sorted(REFERENCE_ROWS) == sorted(m for m in BUILTIN_METHODS if declaration(m).reference_row)
