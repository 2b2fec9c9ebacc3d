"""Timings a run records in ``result.json`` (``measure_inference``: images/s of trunk + method;
``measure_live_epoch``: the paper's epoch time with the trunk in the loop), and the timing
primitives ``protobench perf`` builds its side-by-side ratios on (:mod:`benchmark.estimates.perf`).

Protocol of the paper's runtime table: batch 128, five warm-up batches, the timed region starts
after the images are on the device; a GPU is synchronised before and after each timed call.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from benchmark.backbones import FrozenTrunk
from benchmark.data import ImageDataset
from benchmark.run.training import epoch_order, make_optimizer, run_epoch
from methods.base import PrototypeMethod, Stage, TokenBatch, set_trainable

WARMUP_BATCHES = 5  # the paper's runtime protocol


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, call: Callable[[], Any]) -> float:
    sync(device)
    tic = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - tic


def image_batches(dataset: ImageDataset, batch_size: int, count: int, device: torch.device) -> list[torch.Tensor]:
    """``count`` batches of images, loaded to the device before timing (cycled if the split is small)."""
    n = len(dataset)
    batches = []
    for b in range(count):
        idx = [(b * batch_size + i) % n for i in range(batch_size)]
        batches.append(torch.stack([dataset[i][0] for i in idx]).to(device))
    return batches



def head_forward(trunk: FrozenTrunk, method: PrototypeMethod) -> Callable[[torch.Tensor], torch.Tensor]:
    early = method.ctx.early_block_index if method.needs_early_tokens else None

    def forward(images: torch.Tensor) -> torch.Tensor:
        out = trunk(images, early_block=early)
        n = len(images)
        batch = TokenBatch(tokens=out.tokens, block_input=out.block_input, attention=out.attention,
                           labels=torch.zeros(n, dtype=torch.long, device=images.device),
                           indices=torch.arange(n, device=images.device), grid=trunk.grid,
                           early_tokens=out.early_tokens)
        return method.logits(batch)

    return forward


@torch.inference_mode()
def interleaved_seconds(forwards: list[Callable[[torch.Tensor], Any]], batches: list[torch.Tensor],
                         device: torch.device, warmup: int) -> list[list[float]]:
    """Seconds of each forward on each timed batch (``[forward][batch]``), the forwards taking
    turns on every batch, the first to run rotating from batch to batch (no forward always runs
    first, e.g. on a cold cache)."""
    seconds: list[list[float]] = [[] for _ in forwards]
    for b, images in enumerate(batches):
        for k in [(b + shift) % len(forwards) for shift in range(len(forwards))]:
            elapsed = timed(device, lambda: forwards[k](images))
            if b >= warmup:
                seconds[k].append(elapsed)
    return seconds


def inference_throughput(trunk: FrozenTrunk, method: PrototypeMethod, dataset: ImageDataset, *, batch_size: int,
                         device: torch.device, warmup: int = WARMUP_BATCHES, timed_batches: int = 5) -> float:
    """Images/s of trunk + method logits (the runtime table's inference column)."""
    method.eval()
    batches = image_batches(dataset, batch_size, warmup + timed_batches, device)
    (seconds,) = interleaved_seconds([head_forward(trunk, method)], batches, device, warmup)
    return batch_size * len(seconds) / sum(seconds)


def time_epoch(method: PrototypeMethod, source: Any, stage: Stage, *, seed: int, batch_size: int,
               device: torch.device) -> float:
    """Seconds for one epoch of ``stage`` over ``source``: the training loop's ``run_epoch``
    (forward, loss, backward, step and the ``after_step`` hook per batch), with a fresh
    optimiser when the stage trains."""
    set_trainable(method, stage)
    optimizer = make_optimizer(stage) if stage.trains else None
    order = epoch_order(len(source), seed, 0)
    return timed(device, lambda: run_epoch(method, source, stage, optimizer, order, batch_size=batch_size,
                                           device=device, epoch=0))


def live_trunk_epoch_seconds(method: PrototypeMethod, live: Any, *, seed: int, batch_size: int,
                             device: torch.device) -> dict[str, Any]:
    """The paper's epoch time (tab:supp_runtime): the frozen trunk's forward at every step, images
    read and transformed in the loop as a ``cache = false`` run does (``live``: the run's training
    source without a cache). One epoch of each stage of the method's schedule over the training
    images its epochs read, then the mean over the schedule's epochs (each stage weighted by its
    epoch count), so it compares with the training loop's cached ``epoch_seconds``. Run on the
    trained method after evaluation: it changes the parameters, which nothing saved reads any
    more. Returns the ``timing`` entries of ``result.json``: the mean, and the epoch of each stage."""
    stages = [s for s in method.stages() if s.epochs > 0]
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        per_stage = {s.name: time_epoch(method, live, s, seed=seed, batch_size=batch_size, device=device)
                     for s in stages}
    method.eval()
    total_epochs = sum(s.epochs for s in stages)
    mean = sum(s.epochs * per_stage[s.name] for s in stages) / total_epochs
    return {"epoch_seconds_live_trunk": mean, "live_trunk_stage_epoch_seconds": per_stage}
