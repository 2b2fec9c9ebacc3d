"""Checks of configuration values that raise one clear :class:`ProtobenchError` naming the key,
where it was given and the fix: an unknown key (with the closest valid one), a wrong type or an
out-of-range integer. Used by grids, run specs, cluster profiles and method arguments."""
from __future__ import annotations

from typing import Any

from benchmark.errors import ProtobenchError, did_you_mean


def unknown_key_error(key: str, valid: list[str], where: str) -> ProtobenchError:
    return ProtobenchError(
        f"unknown key {key!r} in {where}{did_you_mean(key, valid)}; valid keys are: {', '.join(sorted(valid))}"
    )


def require_type(key: str, value: Any, expected: type | tuple[type, ...], where: str) -> None:
    """``value`` must be an instance of ``expected``, by the one rule of grid values and method
    hyperparameters (:func:`methods.common.values.check_type`, imported here: loading a grid's
    reader imports no torch until a value is checked)."""
    from methods.common.values import check_type

    try:
        check_type(key, value, expected, where)
    except (TypeError, ValueError) as err:
        raise ProtobenchError(str(err)) from None
