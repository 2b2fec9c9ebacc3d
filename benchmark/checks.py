"""Checks of configuration values that raise one clear :class:`ProtobenchError` naming the key,
where it was given and the fix: an unknown key (with the closest valid one), a wrong type or an
out-of-range integer. Used by grids, run specs, cluster profiles and method arguments."""
from __future__ import annotations

from typing import Any

from benchmark.errors import FieldError, ProtobenchError, did_you_mean


def unknown_key_error(key: str, valid: list[str], where: str) -> ProtobenchError:
    return ProtobenchError(
        f"unknown key {key!r} in {where}{did_you_mean(key, valid)}; valid keys are: {', '.join(sorted(valid))}"
    )


def require_type(key: str, value: Any, expected: type | tuple[type, ...], where: str) -> None:
    """``value`` must be an instance of ``expected``, by the one rule of grid values and method
    hyperparameters (:func:`methods.common.values.type_problem`, imported here: loading a grid's
    reader imports no torch until a value is checked); else a :class:`FieldError` of the field
    ``key`` names (``dataset_args.classes``: ``dataset_args``)."""
    from methods.common.values import type_problem

    problem = type_problem(key, value, expected)
    if problem is not None:
        raise FieldError(where, key.partition(".")[0], problem[1])
