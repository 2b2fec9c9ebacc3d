"""Side-by-side epoch times of the training loop's fast path, in one process: prefetched vs
synchronous batches, and loss terms read once per epoch vs every step (source: issue 12 item 3).

    .venv/bin/python tests/helpers/measure_fast_path.py [--images 256] [--dim 384] [--batch 32] [--repeats 5]

A cache entry of random float16 arrays shaped like a ViT's (16×16 grid + CLS) is
written to a temporary folder and read memory-mapped; vMFProto (appended block of width
``--dim``) trains one end-to-end epoch per measurement, variants interleaved, medians reported.
Not a test: it asserts nothing (timings vary with the machine's load).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import benchmark.run.training
from benchmark.cache.arrays import ArraySpec, ArrayWriter
from benchmark.cache.store import open_or_build
from benchmark.cache.tokens import CachedTokens
from benchmark.run.training import StepLosses, epoch_order, make_optimizer, run_epoch
from methods.base import set_trainable
from methods.base import MethodContext
from methods.registry import build_method
from methods.testing import TinyAppendedBlock

GRID, PREFIX, CLASSES = (16, 16), 1, 8  # TinyAppendedBlock drops one prefix token


def write_entry(root: Path, images: int, dim: int) -> CachedTokens:
    rng = np.random.default_rng(0)
    n = GRID[0] * GRID[1]
    layout = {"tokens": ArraySpec((images, n, dim), np.dtype("float16")),
              "block_input": ArraySpec((images, PREFIX + n, dim), np.dtype("float16")),
              "attention": ArraySpec((images, n), np.dtype("float32")),
              "labels": ArraySpec((images,), np.dtype("int64"))}

    def fill(writers: dict[str, ArrayWriter]) -> dict:
        for start in range(0, images, 64):
            rows = min(64, images - start)
            writers["tokens"].write(rng.standard_normal((rows, n, dim)).astype(np.float16))
            writers["block_input"].write(rng.standard_normal((rows, PREFIX + n, dim)).astype(np.float16))
            attention = rng.random((rows, n)).astype(np.float32)
            writers["attention"].write(attention / attention.sum(1, keepdims=True))
            writers["labels"].write((np.arange(start, start + rows) % CLASSES).astype(np.int64))
        return {"grid": list(GRID)}

    entry, _ = open_or_build(root, "measure-entry", {"measure": images}, layout, fill)
    return CachedTokens(entry, in_memory=False)


def per_step_sync(self: StepLosses, terms: dict) -> None:
    """The loop without the fast path (before issue 12): a host read of every term at every step."""
    for value in terms.values():
        float(value.detach())
    original_record(self, terms)


original_record = StepLosses.record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = write_entry(Path(tmp), args.images, args.dim)
        ctx = MethodContext(num_classes=CLASSES, prototypes_per_class=5, embed_dim=args.dim, grid=GRID,
                            num_prefix_tokens=PREFIX, depth=12, make_block=lambda: TinyAppendedBlock(args.dim))
        torch.manual_seed(0)
        method = build_method("vmfproto", ctx, discovery_epochs=0, end_to_end_epochs=1)
        stage = method.stages()[0]
        set_trainable(method, stage)
        optimizer = make_optimizer(stage)
        device = torch.device("cpu")

        def epoch(prefetch: int, sync_every_step: bool) -> float:
            benchmark.run.training.StepLosses.record = per_step_sync if sync_every_step else original_record
            tic = time.perf_counter()
            run_epoch(method, source, stage, optimizer, epoch_order(len(source), 0, 0), batch_size=args.batch,
                      device=device, epoch=0, prefetch=prefetch)
            return time.perf_counter() - tic

        variants = {"synchronous": (0, False), "prefetch": (2, False), "per-step sync": (0, True)}
        epoch(2, False)  # warm-up: page cache, allocator
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, (prefetch, sync) in variants.items():
                times[name].append(epoch(prefetch, sync))
        median = {name: statistics.median(t) for name, t in times.items()}
        print(f"{args.images} images, batch {args.batch}, width {args.dim}, {args.repeats} interleaved repeats, "
              f"torch threads {torch.get_num_threads()}")
        for name, t in times.items():
            print(f"  {name:14s} median {median[name]:.3f} s/epoch (min {min(t):.3f}, max {max(t):.3f})")
        print(f"prefetch / synchronous: {median['prefetch'] / median['synchronous']:.3f}")
        print(f"once-per-epoch read / per-step sync (both synchronous): "
              f"{median['synchronous'] / median['per-step sync']:.3f}")


if __name__ == "__main__":
    main()
