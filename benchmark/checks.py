"""Checks of configuration values that raise one clear :class:`ProtobenchError` naming the key,
where it was given and the fix: an unknown key (with the closest valid one), a wrong type or an
out-of-range integer. Used by grids, run specs, cluster profiles and method arguments."""
from __future__ import annotations

import difflib
from typing import Any

from benchmark.errors import ProtobenchError

# Every integer a grid gives (RunSpec fields, dataset_args, method_args) lies within ±(2³¹ − 1):
# far above any real count or size, and every derived seed fits a 64-bit integer (training seeds
# its per-epoch generators with seed · 100003 + epoch, benchmark/run/training.py), so an
# out-of-range value fails at grid load, not in a C library after the cache build.
MAX_INTEGER = 2**31 - 1


def unknown_key_error(key: str, valid: list[str], where: str) -> ProtobenchError:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ProtobenchError(
        f"unknown key {key!r} in {where}{hint}; valid keys are: {', '.join(sorted(valid))}"
    )


def require_type(key: str, value: Any, expected: type | tuple[type, ...], where: str) -> None:
    """``value`` must be an instance of ``expected``; a bool only counts as a bool (TOML's
    ``true`` is never an int)."""
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
        kind = " or ".join(t.__name__ for t in types)
        raise ProtobenchError(f"{where}: {key} = {value!r} must be of type {kind}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        raise ProtobenchError(f"{where}: {key} = {value} is out of range: integers must lie within ±{MAX_INTEGER}")
