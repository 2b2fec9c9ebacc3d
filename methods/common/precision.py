"""Numerical precision of a run (RunSpec ``precision``) and the fp32 islands inside it.

* ``fp32``: everything in float32 (float64 where a function says so), as the reference code.
* ``tf32``: float32 tensors, matmuls and convolutions on CUDA in TF32
  (``torch.set_float32_matmul_precision("high")``, ``cudnn.allow_tf32``), for the run only.
* ``bf16``: ``torch.autocast(dtype=bfloat16)`` around the trunk pass, the appended block and the
  heads (:func:`autocast`); parameters, gradients and optimiser states stay float32.

Islands (:func:`float32_island`) are the computations whose accuracy the method's science rests
on: the vMF normaliser, Sinkhorn, the LogDet diversity loss, MGProto's EM. Inside one, autocast
is off and every bfloat16/float16 tensor argument is widened to float32 (float64 stays float64),
so bf16 changes only the inputs they are handed, never how they are computed. Metrics are
computed outside autocast on float32 copies of logits and maps (benchmark/run/evaluation.py).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import torch

from methods.common.precisions import PRECISIONS


_AUTOCAST_DEVICES = ("cpu", "cuda")
_LOW = (torch.bfloat16, torch.float16)

F = TypeVar("F", bound=Callable[..., Any])


def _widen(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _LOW:
        return value.float()
    if isinstance(value, (list, tuple)):
        return type(value)(_widen(v) for v in value)
    return value


@contextmanager
def autocast_off() -> Iterator[None]:
    """Autocast disabled on every device type (inside a bf16 run's autocast region)."""
    with ExitStack() as stack:
        for device_type in _AUTOCAST_DEVICES:
            stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def float32_island(fn: F) -> F:
    """``fn`` runs with autocast off and its bfloat16/float16 tensor arguments widened to float32."""

    @functools.wraps(fn)
    def island(*args: Any, **kwargs: Any) -> Any:
        with autocast_off():
            return fn(*_widen(args), **{k: _widen(v) for k, v in kwargs.items()})

    return island  # type: ignore[return-value]


@contextmanager
def autocast(precision: str, device: torch.device | str) -> Iterator[None]:
    """The autocast region of a compute section (trunk pass, loss terms, hooks, predictions):
    bfloat16 autocast for ``bf16``, nothing otherwise. Autocast is thread-local: enter it in the
    thread that computes."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    device_type = torch.device(device).type
    if precision == "bf16":
        with torch.autocast(device_type, dtype=torch.bfloat16):
            yield
    else:
        yield


@contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """TF32 matmuls and convolutions for ``tf32`` while the run lasts; the previous settings after."""
    if precision != "tf32":
        yield
        return
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]
