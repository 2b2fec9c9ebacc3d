"""What a CUDA run does that a CPU run does not show, checked on the CPU with dispatch modes.

* :class:`AutocastPolicy`: torch's CPU autocast widens ``torch.linalg`` decompositions
  (``linalg_qr``, ``linalg_eigh``, ``linalg_svd``, ``linalg_cholesky_ex``) to float32, its CUDA
  autocast does not (they have an ``AutocastCPU`` kernel and no ``AutocastCUDA`` one), so a bf16
  matmul output reaching them fails on CUDA ("not implemented for 'BFloat16'") where the CPU run
  passes. The CUDA policy, checkable on a CPU: no ``torch.linalg`` call while autocast is on, and
  none handed a bfloat16/float16 tensor (every one inside an fp32 island).
* :class:`HostSyncCounter`: the aten ops that make a CUDA host wait for the device — reading a
  scalar (``item``, ``int``, ``bool``: ``_local_scalar_dense``) and ops whose output shape depends
  on the data (``nonzero``, boolean-mask indexing, ``unique``, ``repeat_interleave`` with tensor
  counts and no ``output_size``, ``masked_select``). A host-to-device copy of a Python list
  (``torch.tensor([...], device=...)``) or of a Python scalar assigned by indexing
  (``x[index] = True``) is invisible on a CPU: none is left in a step (grep). So is a backward
  formula that branches on a dispatch mode: with any mode on, autograd takes ``prod``'s
  zero-safe backward, while a plain CUDA run counts the zeros on the host (FunctionsManual
  ``prod_backward``). ``tests/gpu/test_cuda_policy.py`` runs CUDA's own sync detector on a GPU
  (H100, 2026-11-27: it found both in Deformable ProtoPNet and MGProto, which this count passed).
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_LOW = (torch.bfloat16, torch.float16)


def _tensors(args: Any) -> list[torch.Tensor]:
    flat, _ = torch.utils._pytree.tree_flatten(args)
    return [t for t in flat if isinstance(t, torch.Tensor)]


class AutocastPolicy(TorchFunctionMode):
    """Records ``"torch.linalg.NAME (why)"`` in ``violations`` for every ``torch.linalg`` call made
    while autocast is on (CPU or CUDA) or handed a bfloat16/float16 tensor. A function mode sees
    the call as the code made it, before CPU autocast's kernels widen anything."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch._C._linalg":
            name = "torch.linalg." + func.__name__.removeprefix("linalg_")
            if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
                self.violations[f"{name} (under autocast)"] += 1
            if any(t.dtype in _LOW for t in _tensors((args, kwargs))):
                self.violations[f"{name} (low-precision input)"] += 1
        return func(*args, **kwargs)


_DATA_DEPENDENT = {"aten::nonzero", "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
                   "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::_unique"}


def _host_sync(func: torch._ops.OpOverload, args: Any, kwargs: dict[str, Any]) -> bool:
    name = func._schema.name
    if name == "aten::_local_scalar_dense" or name in _DATA_DEPENDENT:
        return True
    if name == "aten::repeat_interleave":  # every form reaches the counts-only one, which sums them unless told the size
        return func._overloadname == "Tensor" and kwargs.get("output_size") is None
    if name in ("aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)
    return False


class HostSyncCounter(TorchDispatchMode):
    """Counts host syncs while ``counting`` is True; ``where`` holds the op names.

    Reads that stay on the host in a CUDA run are not counted: inside ``torch.optim`` (Adam keeps
    its ``step`` counts on the CPU unless ``capturable``) and ``F.one_hot``'s range check with
    ``num_classes`` given (skipped for CUDA tensors, which rely on ``scatter``'s device assert;
    :class:`OneHotScope` marks it)."""

    def __init__(self) -> None:
        super().__init__()
        self.counting = False
        self.in_one_hot = False
        self.count = 0
        self.where: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if self.counting and not self.in_one_hot and _host_sync(func, args, kwargs) and not _in_optimiser():
            self.count += 1
            self.where[str(func)] += 1
        return func(*args, **kwargs)


class OneHotScope(TorchFunctionMode):
    """Marks ``counter.in_one_hot`` while ``F.one_hot(x, num_classes)`` runs (a builtin: no Python frame)."""

    def __init__(self, counter: HostSyncCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func is torch.nn.functional.one_hot and (len(args) > 1 or "num_classes" in kwargs):
            self.counter.in_one_hot = True
            try:
                return func(*args, **kwargs)
            finally:
                self.counter.in_one_hot = False
        return func(*args, **kwargs)


def _in_optimiser() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if f"{os.sep}torch{os.sep}optim{os.sep}" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


@contextmanager
def step_windows(method: Any, enter: Callable[[], None], leave: Callable[[], None]) -> Iterator[None]:
    """``enter()`` as every training step begins (``loss_terms``, or ``after_step`` in a stage
    without an optimiser) and ``leave()`` after its ``after_step``: forward, backward, optimiser
    step and the per-step hook are inside, batch loading, hooks and epoch ends outside."""
    loss_terms, after_step = method.loss_terms, method.after_step

    def start(*args: Any, **kwargs: Any) -> Any:
        enter()
        return loss_terms(*args, **kwargs)

    def end(*args: Any, **kwargs: Any) -> Any:
        enter()
        try:
            return after_step(*args, **kwargs)
        finally:
            leave()

    method.loss_terms, method.after_step = start, end
    try:
        yield
    finally:
        del method.loss_terms, method.after_step


def count_per_step(method: Any, counter: HostSyncCounter, train: Callable[[], Any]) -> list[int]:
    """Host syncs of every training step (:func:`step_windows`) of ``train()``."""
    counts: list[int] = []
    counter.count = 0

    def enter() -> None:
        counter.counting = True

    def leave() -> None:
        counts.append(counter.count)
        counter.counting, counter.count = False, 0

    with counter, OneHotScope(counter), step_windows(method, enter, leave):
        train()
    return counts
