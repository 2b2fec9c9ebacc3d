"""The training loop: drives a method's stages over token batches, checkpoints every epoch,
resumes from the last finished epoch, fails loudly on a non-finite loss.

The batch order of epoch ``e`` is a pure function of (seed, e), and the checkpoint holds the
model, optimiser, scheduler and every RNG state, so an interrupted and resumed run follows
exactly the path of an uninterrupted one.
"""
from __future__ import annotations

import io
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.errors import ProtobenchError
from benchmark.features import TokenSource
from benchmark.progress import NO_PROGRESS, NO_TASK, Progress, Task
from benchmark.store import atomic_write_bytes
from methods.base import PrototypeMethod, Stage, TokenBatch, TrainData

CHECKPOINT_FORMAT = 1


class NonFiniteLossError(ProtobenchError):
    """A loss term became NaN or infinite: the run stops and names where."""


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
                 epoch_source: TokenSource | None = None) -> None:
        self.source, self.device, self.seed = source, device, seed
        self._epoch_data = self if epoch_source is None else SourceTrainData(epoch_source, device, seed)
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
            yield self.source.batch(order[start:start + batch_size], self.device)


@dataclass
class TrainingReport:
    """Wall time per stage and per epoch (seconds), and where training resumed from."""

    stage_seconds: dict[str, float] = field(default_factory=dict)
    epoch_seconds: list[float] = field(default_factory=list)
    resumed_from_epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        epochs = self.epoch_seconds
        return {
            "stage_seconds": self.stage_seconds,
            "epoch_seconds": sum(epochs) / len(epochs) if epochs else None,
            "epochs_timed": len(epochs),
            "resumed_from_epoch": self.resumed_from_epoch,
        }


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def make_optimizer(stage: Stage) -> torch.optim.Optimizer:
    groups = [{"params": g.params, "lr": g.lr, "weight_decay": g.weight_decay, "name": g.name}
              for g in stage.param_groups]
    if stage.optimizer == "adam":
        return torch.optim.Adam(groups)
    if stage.optimizer == "sgd":
        return torch.optim.SGD(groups, momentum=0.9)
    raise ProtobenchError(f"stage {stage.name!r} asks for unknown optimizer {stage.optimizer!r} (adam | sgd)")


def set_trainable(method: PrototypeMethod, stage: Stage) -> None:
    """Only the parameters a stage lists train."""
    for p in method.parameters():
        p.requires_grad_(False)
    for group in stage.param_groups:
        for p in group.params:
            p.requires_grad_(True)


def total_loss(method: PrototypeMethod, terms: dict[str, torch.Tensor], stage: Stage, epoch: int) -> torch.Tensor:
    """Σ weight · term, checking every term is finite and declared."""
    total: torch.Tensor | None = None
    for name, value in terms.items():
        if name not in method.loss_weights:
            raise ProtobenchError(f"method {method.name!r} returned loss term {name!r} that is not in its "
                                  f"loss_weights ({', '.join(method.loss_weights)})")
        if not torch.isfinite(value).all():
            raise NonFiniteLossError(
                f"non-finite loss: term {name!r} = {value.item()} in stage {stage.name!r}, epoch {epoch} "
                f"(method {method.name!r}); lower the learning rates or check the inputs"
            )
        weight = method.loss_weights[name]
        if weight != 0.0:
            total = weight * value if total is None else total + weight * value
    if total is None:
        raise ProtobenchError(f"stage {stage.name!r} of method {method.name!r} trains parameters but "
                              "returned no loss term with a non-zero weight")
    return total


def run_epoch(method: PrototypeMethod, source: TokenSource, stage: Stage, optimizer: torch.optim.Optimizer | None,
              order: torch.Tensor, *, batch_size: int, device: torch.device, epoch: int,
              task: Task = NO_TASK) -> dict[str, float]:
    """One pass over ``order``: loss, backward and step per batch (when the stage trains), then the
    method's ``after_step`` hook. Returns the epoch mean of each loss term."""
    method.train()
    running: dict[str, float] = {}
    num_batches = math.ceil(len(order) / batch_size)
    for start in range(0, len(order), batch_size):
        batch = source.batch(order[start:start + batch_size], device)
        if optimizer is not None:
            terms = method.loss_terms(batch, stage, epoch)
            loss = total_loss(method, terms, stage, epoch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            for name, value in terms.items():
                running[name] = running.get(name, 0.0) + float(value.detach()) / num_batches
        with torch.no_grad():
            method.after_step(batch, stage, epoch)
        task.advance()
    return running


def _save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a truncated or foreign file
        raise ProtobenchError(f"checkpoint {str(path)!r} cannot be read ({err}); delete it to restart the run") from err


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
    clean_source: TokenSource | None = None,
) -> TrainingReport:
    """Run every stage of ``method`` on ``source``; resume from ``checkpoint_path`` if it holds
    a checkpoint. ``stop_after_epoch`` ends training after that global epoch (tests, preemption).
    ``clean_source``: the un-augmented split the method's hooks read when ``source`` holds
    offline-augmented copies (ProtoPNet main.py pushes on ``train_push_loader``); None when
    ``source`` is the un-augmented split itself."""
    method.to(device)
    data = SourceTrainData(source, device, seed) if clean_source is None else \
        SourceTrainData(clean_source, device, seed, epoch_source=source)
    stages = method.stages()
    report = TrainingReport()
    start_stage, start_epoch, global_epoch = 0, 0, 0
    resume: dict[str, Any] | None = None
    if checkpoint_path is not None and checkpoint_path.exists():
        resume = load_checkpoint(checkpoint_path)
        if resume.get("format") != CHECKPOINT_FORMAT:
            raise ProtobenchError(f"checkpoint {str(checkpoint_path)!r} has an unknown format; delete it to restart")
        method.load_state_dict(resume["method"])
        method.to(device)
        start_stage, start_epoch = resume["stage_index"], resume["epoch_in_stage"]
        report = TrainingReport(**resume["report"])
        report.resumed_from_epoch = resume["global_epoch"]
        _set_rng_state(resume["rng"])
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
        scheduler = stage.scheduler(optimizer) if (optimizer and stage.scheduler) else None
        if resume is not None and stage_index == start_stage and first_epoch > 0:
            if optimizer is not None:
                optimizer.load_state_dict(resume["optimizer"])
            if scheduler is not None:
                scheduler.load_state_dict(resume["scheduler"])
        if first_epoch == 0:
            method.on_stage_start(stage, global_epoch, data)
        for epoch_in_stage in range(first_epoch, stage.epochs):
            tic = time.perf_counter()
            order = epoch_order(len(source), seed, global_epoch)
            task = progress.task(f"{stage.name} epoch {global_epoch + 1}/{total_epochs}",
                                 math.ceil(len(order) / batch_size))
            running = run_epoch(method, source, stage, optimizer, order, batch_size=batch_size, device=device,
                                epoch=global_epoch, task=task)
            if scheduler is not None:
                scheduler.step()
            with torch.no_grad():
                method.on_epoch_end(stage, global_epoch, data)
            elapsed = time.perf_counter() - tic
            report.epoch_seconds.append(elapsed)
            report.stage_seconds[stage.name] = report.stage_seconds.get(stage.name, 0.0) + elapsed
            terms_text = " ".join(f"{k}={v:.4f}" for k, v in running.items())
            log(f"epoch {global_epoch + 1}/{total_epochs} [{stage.name}] {elapsed:.2f}s {terms_text}".rstrip())
            task.done()
            global_epoch += 1
            if checkpoint_path is not None:
                last_in_stage = epoch_in_stage + 1 == stage.epochs
                _save_checkpoint(checkpoint_path, {
                    "format": CHECKPOINT_FORMAT,
                    "method": method.state_dict(),
                    "optimizer": optimizer.state_dict() if optimizer and not last_in_stage else None,
                    "scheduler": scheduler.state_dict() if scheduler and not last_in_stage else None,
                    "stage_index": stage_index + 1 if last_in_stage else stage_index,
                    "epoch_in_stage": 0 if last_in_stage else epoch_in_stage + 1,
                    "global_epoch": global_epoch,
                    "report": {"stage_seconds": report.stage_seconds, "epoch_seconds": report.epoch_seconds,
                               "resumed_from_epoch": report.resumed_from_epoch},
                    "rng": _rng_state(),
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

