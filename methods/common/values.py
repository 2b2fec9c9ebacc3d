"""Type checks of configuration values: one rule for a grid's values and a method's
hyperparameters. Raises Python's own exceptions (TypeError for a wrong type, ValueError for an
integer out of range), as scikit-learn's parameter validation does; the harness
(``benchmark.checks``) turns them into its user-facing error."""
from __future__ import annotations

from typing import Any

# Every integer a grid gives (RunSpec fields, dataset_args, method_args) lies within ±(2³¹ − 1):
# far above any real count or size, and every derived seed fits a 64-bit integer (training seeds
# its per-epoch generators with seed · 100003 + epoch, benchmark/run/training.py), so an
# out-of-range value fails at grid load, not in a C library after the cache build.
MAX_INTEGER = 2**31 - 1


def type_problem(key: str, value: Any, expected: type | tuple[type, ...]) -> tuple[type[Exception], str] | None:
    """What is wrong with ``value`` for ``key`` (the exception type :func:`check_type` raises and
    its message after the place), None when it is an instance of ``expected``."""
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
        kind = " or ".join(t.__name__ for t in types)
        return TypeError, f"{key} = {value!r} must be of type {kind}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        return ValueError, f"{key} = {value} is out of range: integers must lie within ±{MAX_INTEGER}"
    return None


def check_type(key: str, value: Any, expected: type | tuple[type, ...], where: str) -> None:
    """``value`` must be an instance of ``expected`` (TypeError); a bool only counts as a bool
    (TOML's ``true`` is never an int); an int lies within ±:data:`MAX_INTEGER` (ValueError)."""
    problem = type_problem(key, value, expected)
    if problem is not None:
        kind, detail = problem
        raise kind(f"{where}: {detail}")
