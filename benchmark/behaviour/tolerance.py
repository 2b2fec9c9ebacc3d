"""What the probe's tolerance must absorb and what it must not (``protobench check-code METHOD --measure``).

- **Another CPU**: the probe of every configuration unpinned with the kernels of three x86-64 CPUs
  (ATen's scalar, AVX2 and AVX-512 kernels with MKL's SSE4.2, AVX2 and AVX-512 branches,
  ``ATEN_CPU_CAPABILITY`` and ``MKL_CBWR``), and pinned (:data:`benchmark.behaviour.probe.PINNED_ARITHMETIC`)
  with MKL allowed AVX2 only against allowed all (``MKL_ENABLE_INSTRUCTIONS``): must be 0.
- **Another summation order in the code** (a refactor that reassociates a sum): every reduction
  and matrix product of the default configuration re-rounded by a relative ±1 ulp of its dtype
  (:class:`Reassociation`, a ``TorchDispatchMode`` at the ATen level, so forward and backward alike).
- **A change a number shows**: one hyperparameter (a learning rate where the method has one, else a
  temperature, else the first positive float; KMEx: its log-similarity ε, a code constant) moved by
  a relative 1e-6 in the default configuration.

Each is the largest relative deviation over the outputs, beside their tolerance.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from benchmark.behaviour.check import Probed, largest_deviation, run_probes
from benchmark.behaviour.lock import tolerance_of
from benchmark.behaviour.probe import probe_configuration
from benchmark.behaviour.setup import DEFAULT_CONFIGURATION, configurations
from benchmark.errors import ProtobenchError
from benchmark.run.identity import method_lock
from methods.registry import declaration

#: ATen ops whose result depends on the order of a sum (re-rounded by :class:`Reassociation`; a max is
#: exact in any order, and its backward finds the maximum by equality)
REASSOCIATED = frozenset({
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "sum", "mean", "nansum", "cumsum",
    "logsumexp", "_softmax", "_log_softmax", "var", "std", "var_mean", "std_mean", "linalg_vector_norm", "norm",
    "native_layer_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
    "convolution", "_cdist_forward", "_euclidean_dist", "prod", "_linalg_eigh", "_linalg_svd", "linalg_qr",
    "_linalg_slogdet", "linalg_cholesky_ex", "_linalg_solve_ex", "linalg_inv_ex",
})
RELATIVE_CHANGE = 1e-6
#: a code constant to move where a method has no hyperparameter that moves its numbers smoothly
CONSTANTS = {"kmex": ("methods.kmex", "EPSILON")}
#: the environments each comparison runs the probe in (as different CPUs would), pinned and unpinned
CPUS = {True: ({}, {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}),
        False: ({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "SSE4_2"},
                {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
                {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512"})}


class Reassociation(TorchDispatchMode):
    """Every functional :data:`REASSOCIATED` op's floating result × (1 + u·eps), u uniform in
    [−1, 1] from a seeded generator: the rounding of another summation order."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.generator = torch.Generator().manual_seed(seed)

    def _jitter(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
            u = torch.rand(value.shape, generator=self.generator, dtype=value.dtype) * 2 - 1
            return value * (1 + torch.finfo(value.dtype).eps * u)
        return value

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        result = func(*args, **(kwargs or {}))
        functional = not func._schema.is_mutable  # an out= or in-place overload writes into its argument
        return tree_map(self._jitter, result) if functional and func.overloadpacket.__name__ in REASSOCIATED else result


@dataclass
class Measured:
    method: str
    dtype: str
    tolerances: tuple[float, ...]  # of its outputs
    pinned_isa: float  # pinned, MKL allowed AVX2 vs all its kernels (must be 0)
    unpinned_isa: float  # unpinned, three CPUs' kernels (the largest deviation from the first)
    reassociation: list[float]  # per seed
    changed: str  # what was moved by RELATIVE_CHANGE
    change: float

    def line(self) -> str:
        tolerance = "/".join(f"{t:.0e}" for t in sorted(set(self.tolerances)))
        return (f"{self.method} ({self.dtype}, tolerance {tolerance}): three CPUs' kernels {self.unpinned_isa:.1e} "
                f"unpinned, {self.pinned_isa:.1e} pinned; a reassociated sum at most "
                f"{max(self.reassociation):.1e} ({len(self.reassociation)} seeds); {self.changed} × (1 + "
                f"{RELATIVE_CHANGE:g}) {self.change:.1e}")


def _moved_hyperparameter(method: str) -> str | None:
    if method in CONSTANTS:
        return None
    floats = [key for key, hp in declaration(method).hyperparameters.items()
              if hp.kind == "float" and isinstance(hp.default, (int, float)) and hp.default > 0]
    for word in ("lr", "temperature"):
        found = [key for key in floats if word in key.split("_")]
        if found:
            return found[0]
    return floats[0] if floats else None


@contextmanager
def _moved_constant(method: str) -> Iterator[str]:
    module_name, name = CONSTANTS[method]
    module = importlib.import_module(module_name)
    before = getattr(module, name)
    setattr(module, name, before * (1 + RELATIVE_CHANGE))
    try:
        yield f"{module_name}.{name}"
    finally:
        setattr(module, name, before)


def _isa_gap(method: str, dtype: str | None, pinned: bool) -> tuple[Probed, float]:
    runs = [run_probes([(method, dtype)], pinned=pinned, environment=environment)[0] for environment in CPUS[pinned]]
    for found in runs:
        if isinstance(found, str):
            raise ProtobenchError(f"{method}: the probe failed: {found}")
    first = runs[0]
    return first, max(largest_deviation(first.outputs, other.outputs) for other in runs[1:])  # type: ignore[union-attr]


def measure(method: str, seeds: int = 3) -> Measured:
    """The deviations of :mod:`this module's <benchmark.behaviour.tolerance>` three measurements, in
    the dtype the method's lock records (a probe that fails in it is an error, never a quiet fallback
    to another dtype); the first dtype it runs in when it has no lock entry yet."""
    lock = method_lock(method)
    known = lock.methods.get(method) if lock is not None else None
    probed, pinned = _isa_gap(method, known.dtype if known else None, True)
    _, unpinned = _isa_gap(method, probed.dtype, False)
    args = configurations(method)[DEFAULT_CONFIGURATION]
    clean = {DEFAULT_CONFIGURATION: probe_configuration(method, args, probed.dtype)}
    noise = []
    for seed in range(seeds):
        with Reassociation(seed):
            noisy = {DEFAULT_CONFIGURATION: probe_configuration(method, args, probed.dtype)}
        noise.append(largest_deviation(noisy, clean))
    key = _moved_hyperparameter(method)
    if key is not None:
        value = {**declaration(method).defaults(), **args}[key]
        moved = probe_configuration(method, {**args, key: value * (1 + RELATIVE_CHANGE)}, probed.dtype)
        changed = f"hyperparameter {key}"
    else:
        with _moved_constant(method) as changed:
            moved = probe_configuration(method, args, probed.dtype)
    tolerances = tuple(tolerance_of(a) for outputs in probed.outputs.values() for a in outputs.values())
    return Measured(method, probed.dtype, tolerances, pinned, unpinned, noise, changed,
                    largest_deviation({DEFAULT_CONFIGURATION: moved}, clean))
