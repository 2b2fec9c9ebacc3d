"""``protobench perf``: side-by-side timings in one process, reported as ratios.

- trunk forward throughput (images/s, images already on the device);
- a method's inference throughput (trunk + head) vs the bare trunk;
- one training epoch of the method's last training stage from the token cache vs the same
  epoch recomputing the trunk on every batch (``cache = false``);
- for a run with ``measure_live_epoch``, the mean epoch of its schedule with the trunk in the
  loop (``live_trunk_epoch_seconds``), recorded next to the cached epoch time in ``result.json``.

Protocol of the paper's runtime table: batch 128, five warm-up batches, the timed region
starts after the images are on the device.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmark.backbones import FrozenTrunk
from benchmark.data import ImageDataset
from benchmark.runner import Prepared
from benchmark.training import epoch_order, make_optimizer, run_epoch, set_trainable
from methods.base import PrototypeMethod, Stage, TokenBatch

WARMUP_BATCHES = 5


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _image_batches(dataset: ImageDataset, batch_size: int, count: int, device: torch.device) -> list[torch.Tensor]:
    """``count`` batches of images, loaded to the device before timing (cycled if the split is small)."""
    n = len(dataset)
    batches = []
    for b in range(count):
        idx = [(b * batch_size + i) % n for i in range(batch_size)]
        batches.append(torch.stack([dataset[i][0] for i in idx]).to(device))
    return batches


@torch.inference_mode()
def _throughput(forward: Callable[[torch.Tensor], Any], batches: list[torch.Tensor], device: torch.device,
                warmup: int) -> float:
    for images in batches[:warmup]:
        forward(images)
    _sync(device)
    tic = time.perf_counter()
    for images in batches[warmup:]:
        forward(images)
    _sync(device)
    return sum(len(b) for b in batches[warmup:]) / (time.perf_counter() - tic)


@torch.inference_mode()
def _paired_throughput(first: Callable[[torch.Tensor], Any], second: Callable[[torch.Tensor], Any],
                       batches: list[torch.Tensor], device: torch.device, warmup: int) -> tuple[float, float, float]:
    """Images/s of ``first`` and of ``second``, timed alternately on each batch, and the median over
    batches of the per-batch ratio second/first throughput (robust to a machine whose speed drifts)."""
    for images in batches[:warmup]:
        first(images)
        second(images)
    seconds: list[tuple[float, float]] = []
    for images in batches[warmup:]:
        pair = []
        for forward in (first, second):
            _sync(device)
            tic = time.perf_counter()
            forward(images)
            _sync(device)
            pair.append(time.perf_counter() - tic)
        seconds.append((pair[0], pair[1]))
    images_timed = sum(len(b) for b in batches[warmup:])
    ratio = statistics.median(a / b for a, b in seconds)
    return images_timed / sum(a for a, _ in seconds), images_timed / sum(b for _, b in seconds), ratio


def _head_forward(trunk: FrozenTrunk, method: PrototypeMethod) -> Callable[[torch.Tensor], torch.Tensor]:
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


def inference_throughput(trunk: FrozenTrunk, method: PrototypeMethod, dataset: ImageDataset, *, batch_size: int,
                         device: torch.device, warmup: int = WARMUP_BATCHES, timed_batches: int = 5) -> float:
    """Images/s of trunk + method logits (the runtime table's inference column)."""
    method.eval()
    batches = _image_batches(dataset, batch_size, warmup + timed_batches, device)
    return _throughput(_head_forward(trunk, method), batches, device, warmup)


def _time_epoch(prep: Prepared, source: Any, seed: int, stage: Stage | None = None) -> float:
    """Seconds for one epoch of ``stage`` (default: the method's last training stage) over
    ``source``: the training loop's ``run_epoch`` (forward, loss, backward, step and the
    ``after_step`` hook per batch), with a fresh optimiser when the stage trains."""
    method = prep.method
    if stage is None:
        stage = [s for s in method.stages() if s.trains][-1]
    set_trainable(method, stage)
    optimizer = make_optimizer(stage) if stage.trains else None
    order = epoch_order(len(source), seed, 0)
    _sync(prep.device)
    tic = time.perf_counter()
    run_epoch(method, source, stage, optimizer, order, batch_size=prep.spec.batch_size, device=prep.device, epoch=0)
    _sync(prep.device)
    return time.perf_counter() - tic


def live_trunk_epoch_seconds(prep: Prepared) -> dict[str, Any]:
    """The paper's epoch time (tab:supp_runtime): the frozen trunk's forward at every step, images
    read and transformed in the loop as a ``cache = false`` run does. One epoch of each stage of
    the method's schedule over the training images its epochs read, then the mean over the
    schedule's epochs (each stage weighted by its epoch count), so it compares with the training
    loop's cached ``epoch_seconds``. Run on the trained method after evaluation: it changes the
    parameters, which nothing saved reads any more. Returns the ``timing`` entries of
    ``result.json``: the mean, and the epoch of each stage."""
    live = prep.train_source(None)  # cache_root None: the trunk runs on every batch
    stages = [s for s in prep.method.stages() if s.epochs > 0]
    with torch.random.fork_rng(devices=[prep.device] if prep.device.type == "cuda" else []):
        per_stage = {s.name: _time_epoch(prep, live, prep.spec.seed, s) for s in stages}
    prep.method.eval()
    total_epochs = sum(s.epochs for s in stages)
    mean = sum(s.epochs * per_stage[s.name] for s in stages) / total_epochs
    return {"epoch_seconds_live_trunk": mean, "live_trunk_stage_epoch_seconds": per_stage}


def measure(preps: list[Prepared], cache_root: Path, *, warmup: int = WARMUP_BATCHES,
            timed_batches: int = 5) -> list[dict[str, Any]]:
    """Timings of several prepared runs side by side in this process. The epoch that recomputes
    the trunk is measured for the first run only (its cost is the trunk's, whatever the method)."""
    first = preps[0]
    device = first.device
    batches = _image_batches(first.test_set, first.spec.eval_batch_size, warmup + timed_batches, device)
    rows = []
    for k, prep in enumerate(preps):
        spec = prep.spec
        prep.method.to(device).eval()
        # bare trunk and trunk + method alternately on every batch, so both see the same machine state
        trunk_ips, head_ips, ratio = _paired_throughput(
            lambda x: prep.trunk(x), _head_forward(prep.trunk, prep.method), batches, device, warmup)
        cached = prep.train_source(cache_root)
        _time_epoch(prep, cached, spec.seed)  # warm-up: page cache, allocator
        row = {
            "run": spec.label,
            "method": f"{spec.method} J={spec.prototypes_per_class}"
                      + ("" if spec.variant == "default" else f" [{spec.variant}]"),
            "device": str(device),
            "batch_size": spec.eval_batch_size,
            "train_images": len(cached),
            "trunk_images_per_second": trunk_ips,
            "method_inference_images_per_second": head_ips,
            "inference_ratio_method_over_trunk": ratio,
            "epoch_seconds_from_cache": statistics.median(_time_epoch(prep, cached, spec.seed) for _ in range(3)),
        }
        if k == 0:
            live = _time_epoch(prep, prep.train_source(None), spec.seed)
            row["epoch_seconds_recomputing_trunk"] = live
            row["epoch_speedup_from_cache"] = live / row["epoch_seconds_from_cache"]
        rows.append(row)
    return rows
