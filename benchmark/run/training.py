"""The training loop: drives a method's stages over token batches, checkpoints every epoch (or
every ``checkpoint_every`` epochs and at the end of each stage), resumes from the last
checkpoint, fails loudly on a non-finite loss.

The loop never waits for the device within an epoch: towards CUDA batches are read ahead on a
thread (benchmark/cache/prefetch.py; on a CPU the thread would compete with the compute for the
same cores and gave no gain in tests/helpers/measure_fast_path.py, so there they are read in step), loss terms stay on the device and are read once at the end of
the epoch, which is where a non-finite term is reported, naming its first step. The steps after
that one have updated the weights with non-finite gradients, so the epoch is discarded: it is
not checkpointed, and the checkpoint of the previous epoch is intact to resume from (lower the
learning rates first).

The batch order of epoch ``e`` is a pure function of (seed, e), and the checkpoint holds the
model, optimiser, scheduler and every RNG state, so an interrupted and resumed run follows
exactly the path of an uninterrupted one.

Checkpoints hold only tensors and plain Python data and are read with torch's weights-only
unpickler, so a crafted ``checkpoint.pt`` cannot run code (:mod:`benchmark.run.checkpoint`). Each
records the code versions that trained it; resuming under another version needs ``allow_code_change``.
"""
from __future__ import annotations

import math
import random
import time
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark import CUBLAS_WORKSPACE
from benchmark.errors import ProtobenchError
from benchmark.cache.prefetch import DEFAULT_DEPTH, Prefetcher
from benchmark.cache.tokens import TokenSource
from benchmark.progress import NO_PROGRESS, NO_TASK, Progress, Task
from benchmark.run.checkpoint import CHECKPOINT_FORMAT, resume_checkpoint, save_checkpoint
from benchmark.run.provenance import code_version
from benchmark.run.schedules import clip_gradients, make_optimizer, make_scheduler
from methods.base import TOKEN_FIELDS, PrototypeMethod, Stage, TokenBatch, TrainData, set_trainable
from methods.common.precision import autocast

#: the workspaces with which cuBLAS is deterministic (CUDA docs, cuBLAS "Results reproducibility")
DETERMINISTIC_CUBLAS_WORKSPACES = (":4096:8", ":16:8")


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


def run_epoch(method: PrototypeMethod, source: TokenSource, stage: Stage, optimizer: torch.optim.Optimizer | None,
              order: torch.Tensor, *, batch_size: int, device: torch.device, epoch: int,
              task: Task = NO_TASK, precision: str = "fp32", prefetch: int | None = None,
              step_scheduler: torch.optim.lr_scheduler.LRScheduler | None = None) -> dict[str, float]:
    """One pass over ``order``: loss, backward, the stage's gradient clipping, step and
    ``step_scheduler`` step per batch (when the stage trains), then the method's ``after_step`` hook. Returns the epoch mean of each loss term. Batches hold only the
    arrays the method reads and are read ``prefetch`` batches ahead (0: synchronously; None: two
    towards CUDA, none on a CPU: :func:`prefetch_depth`); the forward
    passes run under the run's ``precision`` (autocast for bf16)."""
    method.train()
    num_batches = math.ceil(len(order) / batch_size)
    losses = StepLosses(method, stage, epoch, num_batches)
    chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    batches = Prefetcher(lambda rows: source.batch(rows, device, reads=method.reads), chunks,
                         depth=0 if len(chunks) < 2 else prefetch_depth(device) if prefetch is None else prefetch,
                         device=device)
    try:
        for batch in batches:
            if optimizer is not None:
                with numerical_step(method, stage, epoch, "the loss terms, backward pass and optimiser step"):
                    with autocast(precision, device):
                        terms = method.loss_terms(batch, stage, epoch)
                        loss = total_loss(method, terms, stage, epoch)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    clip_gradients(stage, optimizer)
                    optimizer.step()
                    if step_scheduler is not None:
                        step_scheduler.step()
                losses.record(terms)
            with torch.no_grad(), numerical_step(method, stage, epoch, "the after_step hook"), \
                    autocast(precision, device):
                method.after_step(batch, stage, epoch)
            task.advance()
    except NonFiniteLossError as err:  # a decomposition failed: say if the loss had gone non-finite before
        where = losses.first_non_finite()
        if where is None:
            raise
        raise NonFiniteLossError(f"{err}; the loss was first non-finite earlier: {where}") from err.__cause__
    finally:
        batches.close()
    return losses.epoch_means()


@contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """``torch.use_deterministic_algorithms(True)`` for the run (docs/guides/gpu.md): CUDA ops without a deterministic kernel then raise instead of varying. cuBLAS
    reads ``CUBLAS_WORKSPACE_CONFIG`` once, when it starts: importing ``benchmark`` sets it at
    process start (:data:`benchmark.CUBLAS_WORKSPACE`); a value without a deterministic workspace
    is refused here, before the run computes anything."""
    if not enabled:
        yield
        return
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if workspace not in DETERMINISTIC_CUBLAS_WORKSPACES:
        raise ProtobenchError(
            f"deterministic = true needs CUBLAS_WORKSPACE_CONFIG set to {' or '.join(DETERMINISTIC_CUBLAS_WORKSPACES)} "
            f"before the process starts, but it is {workspace!r}; unset it (protobench sets "
            f"{CUBLAS_WORKSPACE} at start) or set one of those, or run with deterministic = false")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def train(
    method: PrototypeMethod,
    source: TokenSource,
    *,
    seed: int,
    batch_size: int,
    device: torch.device,
    checkpoint_path: Path | None,
    log: Callable[[str], None] = print,
    progress: Progress = NO_PROGRESS,
    stop_after_epoch: int | None = None,
    allow_code_change: bool = False,
    precision: str = "fp32",
    checkpoint_every: int = 1,
    prefetch: int | None = None,
    on_epoch_end: Callable[[EpochRecord], None] | None = None,
    clean_source: TokenSource | None = None,
) -> TrainingReport:
    """Run every stage of ``method`` on ``source``; resume from ``checkpoint_path`` if it holds
    a checkpoint (written by this code version, or any with ``allow_code_change``).
    ``stop_after_epoch`` ends training after that global epoch (tests, preemption); the
    checkpoint is written after every ``checkpoint_every``-th global epoch and the last epoch of
    each stage. ``precision``: autocast of steps and hooks (methods/common/precision.py);
    ``prefetch``: batches read ahead (0: synchronously; None: :func:`prefetch_depth`).
    ``on_epoch_end`` receives each epoch's record before the epoch is checkpointed.
    ``clean_source``: the un-augmented split the method's hooks read when ``source`` holds
    offline-augmented copies (ProtoPNet main.py pushes on ``train_push_loader``); None when
    ``source`` is the un-augmented split itself."""
    if checkpoint_every < 1:
        raise ProtobenchError(f"checkpoint_every = {checkpoint_every} must be ≥ 1")
    method.to(device)
    data = SourceTrainData(source, device, seed, reads=method.reads) if clean_source is None else \
        SourceTrainData(clean_source, device, seed, epoch_source=source, reads=method.reads)
    stages = method.stages()
    report = TrainingReport()
    start_stage, start_epoch, global_epoch = 0, 0, 0
    code = code_version()
    resume = resume_checkpoint(checkpoint_path, code=code, allow_code_change=allow_code_change)
    if resume is not None:
        method.load_state_dict(resume["method"])
        method.to(device)
        start_stage, start_epoch = resume["stage_index"], resume["epoch_in_stage"]
        report = TrainingReport(**resume["report"])
        report.resumed_from_epoch = resume["global_epoch"]
        _set_rng_state(resume["rng"], device)
        log(f"resuming at stage {stage_name(stages, start_stage)}, epoch {resume['global_epoch']}")
    else:
        seed_everything(seed)

    global_epoch = sum(s.epochs for s in stages[:start_stage]) + start_epoch
    total_epochs = sum(s.epochs for s in stages)
    for stage_index in range(start_stage, len(stages)):
        stage = method.stages()[stage_index]  # rebuilt on the live module (fresh param lists)
        first_epoch = start_epoch if stage_index == start_stage else 0
        if stage.epochs == 0 or first_epoch >= stage.epochs:
            continue
        set_trainable(method, stage)
        optimizer = make_optimizer(stage) if stage.trains else None
        scheduler = make_scheduler(stage, optimizer, math.ceil(len(source) / batch_size))
        per_step = scheduler is not None and stage.step_schedule is not None
        if resume is not None and stage_index == start_stage and first_epoch > 0:
            if optimizer is not None:
                optimizer.load_state_dict(resume["optimizer"])
            if scheduler is not None:
                scheduler.load_state_dict(resume["scheduler"])
        if first_epoch == 0:
            with numerical_step(method, stage, global_epoch, "the on_stage_start hook"), autocast(precision, device):
                method.on_stage_start(stage, global_epoch, data)
        for epoch_in_stage in range(first_epoch, stage.epochs):
            tic = time.perf_counter()
            order = epoch_order(len(source), seed, global_epoch)
            task = progress.task(f"{stage.name} epoch {global_epoch + 1}/{total_epochs}",
                                 math.ceil(len(order) / batch_size))
            lrs = {g["name"]: g["lr"] for g in optimizer.param_groups} if optimizer is not None else {}
            running = run_epoch(method, source, stage, optimizer, order, batch_size=batch_size, device=device,
                                epoch=global_epoch, task=task, precision=precision, prefetch=prefetch,
                                step_scheduler=scheduler if per_step else None)
            if scheduler is not None and not per_step:
                scheduler.step()
            with torch.no_grad(), numerical_step(method, stage, global_epoch, "the on_epoch_end hook"), \
                    autocast(precision, device):
                method.on_epoch_end(stage, global_epoch, data)
            elapsed = time.perf_counter() - tic
            report.epoch_seconds.append(elapsed)
            report.stage_seconds[stage.name] = report.stage_seconds.get(stage.name, 0.0) + elapsed
            terms_text = " ".join(f"{k}={v:.4f}" for k, v in running.items())
            log(f"epoch {global_epoch + 1}/{total_epochs} [{stage.name}] {elapsed:.2f}s {terms_text}".rstrip())
            if on_epoch_end is not None:
                on_epoch_end(EpochRecord(global_epoch + 1, stage.name, elapsed, lrs, running))
            task.done()
            global_epoch += 1
            report.record_epoch(code, global_epoch)
            last_in_stage = epoch_in_stage + 1 == stage.epochs
            if checkpoint_path is not None and (last_in_stage or global_epoch % checkpoint_every == 0):
                save_checkpoint(checkpoint_path, {
                    "format": CHECKPOINT_FORMAT,
                    "method": method.state_dict(),
                    "optimizer": optimizer.state_dict() if optimizer and not last_in_stage else None,
                    "scheduler": scheduler.state_dict() if scheduler and not last_in_stage else None,
                    "stage_index": stage_index + 1 if last_in_stage else stage_index,
                    "epoch_in_stage": 0 if last_in_stage else epoch_in_stage + 1,
                    "global_epoch": global_epoch,
                    "report": {"stage_seconds": report.stage_seconds, "epoch_seconds": report.epoch_seconds,
                               "resumed_from_epoch": report.resumed_from_epoch,
                               "code_versions": report.code_versions},
                    "rng": _rng_state(device),
                })
            if stop_after_epoch is not None and global_epoch >= stop_after_epoch:
                raise TrainingInterrupted(global_epoch)
    method.eval()
    return report


class TrainingInterrupted(Exception):
    """Raised by ``train(stop_after_epoch=…)`` after checkpointing (tests, preemption drills)."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"training stopped after epoch {epoch}")
        self.epoch = epoch


def stage_name(stages: list[Stage], index: int) -> str:
    return stages[index].name if index < len(stages) else "(done)"

