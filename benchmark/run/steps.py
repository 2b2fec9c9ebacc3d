"""What the training loop (benchmark/run/training.py) is made of, a run at a time: the batch
order of an epoch, the training split as the method's hooks read it, the loss of a step and its
terms kept on the device, the RNG state a checkpoint holds, an epoch's record and a run's report.
The loop itself drives one run or several in lockstep (``tune --batch K``) with them."""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from benchmark.errors import ProtobenchError
from benchmark.cache.prefetch import DEFAULT_DEPTH
from benchmark.cache.tokens import TokenSource
from methods.base import TOKEN_FIELDS, PrototypeMethod, Stage, TokenBatch, TrainData


class NonFiniteLossError(ProtobenchError):
    """A loss term became NaN or infinite, or a decomposition failed: the run stops and names where."""


@contextmanager
def numerical_step(method: PrototypeMethod, stage: Stage, epoch: int, part: str) -> Iterator[None]:
    """A failed Cholesky, eigen- or singular value decomposition inside ``part`` of a step (a
    symptom of diverged parameters) → :class:`NonFiniteLossError` naming stage, epoch and part."""
    try:
        yield
    except torch.linalg.LinAlgError as err:
        raise NonFiniteLossError(
            f"numerical failure in {part} of stage {stage.name!r}, epoch {epoch} (method {method.name!r}): "
            f"{str(err).splitlines()[0]}; lower the learning rates or check the inputs") from err


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """Shuffled indices of epoch ``epoch``: depends only on (seed, epoch), so resuming is exact."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g)


class SourceTrainData(TrainData):
    """The un-augmented training split as seen by method hooks (push, last-layer phases); its
    ``epoch_data`` reads ``epoch_source`` (the offline-augmented copies the epochs train on), or
    the split itself when there is none."""

    def __init__(self, source: TokenSource, device: torch.device, seed: int, *,
                 epoch_source: TokenSource | None = None, reads: frozenset[str] = TOKEN_FIELDS) -> None:
        self.source, self.device, self.seed, self.reads = source, device, seed, reads
        self._epoch_data = self if epoch_source is None else SourceTrainData(epoch_source, device, seed, reads=reads)
        self._calls = 0

    def __len__(self) -> int:
        return len(self.source)

    @property
    def epoch_data(self) -> TrainData:
        return self._epoch_data

    def batches(self, batch_size: int, *, shuffle: bool = False) -> Iterator[TokenBatch]:
        n = len(self.source)
        if shuffle:
            self._calls += 1
            order = epoch_order(n, self.seed + 7919, self._calls)
        else:
            order = torch.arange(n)
        for start in range(0, n, batch_size):
            yield self.source.batch(order[start:start + batch_size], self.device, reads=self.reads)


@dataclass(frozen=True)
class EpochRecord:
    """What ``train`` reports after each epoch, before its checkpoint (the runner writes it to
    ``metrics.jsonl``)."""

    epoch: int  # 1-based, global over stages
    stage: str
    seconds: float
    lr: dict[str, float]  # param-group name → learning rate of the epoch's (first) step
    terms: dict[str, float]  # loss term → epoch mean (empty for a stage that trains nothing)


@dataclass
class TrainingReport:
    """Wall time per stage and per epoch (seconds), where training resumed from, and which code
    versions trained which epochs: ``[{"version": …, "epochs": [first, last]}, …]`` (1-based global
    epochs, in training order; one entry unless a resume passed ``allow_code_change``)."""

    stage_seconds: dict[str, float] = field(default_factory=dict)
    epoch_seconds: list[float] = field(default_factory=list)
    resumed_from_epoch: int = 0
    code_versions: list[dict[str, Any]] = field(default_factory=list)

    def record_epoch(self, version: str, epoch: int) -> None:
        """Note that code ``version`` trained global epoch ``epoch`` (1-based)."""
        if self.code_versions and self.code_versions[-1]["version"] == version:
            self.code_versions[-1]["epochs"][1] = epoch
        else:
            self.code_versions.append({"version": version, "epochs": [epoch, epoch]})

    def to_json(self) -> dict[str, Any]:
        epochs = self.epoch_seconds
        return {
            "stage_seconds": self.stage_seconds,
            "epoch_seconds": sum(epochs) / len(epochs) if epochs else None,
            "epochs_timed": len(epochs),
            "resumed_from_epoch": self.resumed_from_epoch,
        }


def _rng_state(device: torch.device) -> dict[str, Any]:
    """Every RNG state the run draws from, in types the weights-only unpickler accepts: Python's is
    a tuple of ints, NumPy's MT19937 key (624 × uint32) goes into an int64 tensor, which holds it
    exactly; the CUDA generator of the run's device only (a CPU run starts no CUDA context, and a
    resume sees however many GPUs its job was given)."""
    kind, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    numpy_state = {"kind": str(kind), "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                   "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)}
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    np.random.set_state((numpy_state["kind"], numpy_state["key"].numpy().astype(np.uint32), numpy_state["pos"],
                         numpy_state["has_gauss"], numpy_state["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        saved = state["cuda"]  # one generator's state; a list of every device's before issue 23
        index = torch.device(device).index or 0
        if isinstance(saved, list | tuple):
            saved = saved[index] if index < len(saved) else None
        if saved is not None:
            torch.cuda.set_rng_state(saved, device)


def total_loss(method: PrototypeMethod, terms: dict[str, torch.Tensor], stage: Stage, epoch: int) -> torch.Tensor:
    """Σ weight · term, checking every term is declared (finiteness: :class:`StepLosses`, per epoch)."""
    total: torch.Tensor | None = None
    for name, value in terms.items():
        if name not in method.loss_weights:
            raise ProtobenchError(f"method {method.name!r} returned loss term {name!r} that is not in its "
                                  f"loss_weights ({', '.join(method.loss_weights)})")
        weight = method.loss_weights[name]
        if weight != 0.0:
            total = weight * value if total is None else total + weight * value
    if total is None:
        raise ProtobenchError(f"stage {stage.name!r} of method {method.name!r} trains parameters but "
                              "returned no loss term with a non-zero weight")
    return total


class StepLosses:
    """The loss terms of an epoch's steps, kept on the device: one host transfer per epoch."""

    def __init__(self, method: PrototypeMethod, stage: Stage, epoch: int, num_batches: int) -> None:
        self.method, self.stage, self.epoch, self.num_batches = method, stage, epoch, num_batches
        self._names: list[tuple[str, ...]] = []
        self._values: list[torch.Tensor] = []

    def record(self, terms: dict[str, torch.Tensor]) -> None:
        self._names.append(tuple(terms))
        self._values.append(torch.stack([value.detach().float().reshape(()) for value in terms.values()]))

    def _host(self) -> list[list[float]]:
        if not self._values:
            return []
        flat = torch.cat(self._values).cpu().tolist()  # the epoch's one synchronisation
        rows, start = [], 0
        for names in self._names:
            rows.append(flat[start:start + len(names)])
            start += len(names)
        return rows

    def first_non_finite(self, rows: list[list[float]] | None = None) -> str | None:
        """Where the loss first became non-finite ("term 'ce' = nan at step 3 of 12"), or None."""
        for step, (names, values) in enumerate(zip(self._names, self._host() if rows is None else rows)):
            for name, value in zip(names, values):
                if not math.isfinite(value):
                    return f"term {name!r} = {value} at step {step + 1} of {self.num_batches}"
        return None

    def epoch_means(self) -> dict[str, float]:
        """Each term's sum over steps / number of batches; a non-finite term raises
        :class:`NonFiniteLossError` naming stage, epoch, term and its first step."""
        rows = self._host()
        where = self.first_non_finite(rows)
        if where is not None:
            raise NonFiniteLossError(
                f"non-finite loss: {where} in stage {self.stage.name!r}, epoch {self.epoch} "
                f"(method {self.method.name!r}); the epoch was not checkpointed (the steps after it trained "
                "on non-finite gradients), so the run resumes from the previous epoch's checkpoint; "
                "lower the learning rates or check the inputs")
        means: dict[str, float] = {}
        for names, values in zip(self._names, rows):
            for name, value in zip(names, values):
                means[name] = means.get(name, 0.0) + value / self.num_batches
        return means


def prefetch_depth(device: torch.device) -> int:
    """Batches read ahead by default: two towards CUDA (the copies overlap the GPU's work), none
    on a CPU (a reading thread competes with the compute for the cores and gave no gain:
    fastest-epoch ratio 1.1–1.3× slower in tests/helpers/measure_fast_path.py)."""
    return DEFAULT_DEPTH if device.type == "cuda" else 0


@dataclass
class Member:
    """One run the training loop drives (alone, or with others in lockstep): its method, its
    training tokens (``clean``: the un-augmented split its hooks read when ``source`` holds
    augmented copies), what it is told after each epoch and where its own log lines go; then, as
    it trains, its report, why it left the loop (``outcome``: a failure or pruning, None while it
    trains), its RNG states (in lockstep: swapped in around its own work), the split its hooks
    read, and its stage's optimiser, scheduler and step losses."""

    method: PrototypeMethod
    source: TokenSource
    clean: TokenSource | None = None
    on_epoch_end: Callable[[EpochRecord], None] | None = None
    log: Callable[[str], None] = print
    report: TrainingReport = field(default_factory=TrainingReport)
    outcome: BaseException | None = None
    rng: dict[str, Any] = field(default_factory=dict)
    data: SourceTrainData | None = None
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    stage: Stage | None = None
    losses: StepLosses | None = None
    lrs: dict[str, float] = field(default_factory=dict)

    def hook_data(self, device: torch.device, seed: int) -> SourceTrainData:
        """The split its method's hooks read (push, last-layer phases): ``clean`` where ``source``
        holds augmented copies, whose ``epoch_data`` then reads ``source``."""
        reads = self.method.reads
        return SourceTrainData(self.source, device, seed, reads=reads) if self.clean is None else \
            SourceTrainData(self.clean, device, seed, epoch_source=self.source, reads=reads)
