"""Small synthetic cache entries for the store tests: no trunk, arrays from a seeded generator."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.cache.arrays import ArraySpec, ArrayWriter
from benchmark.cache.entry import Entry
from benchmark.cache.store import open_or_build

NAME = "toy-train-clean-0123456789abcdef"
ROWS = 40


def toy_arrays(seed: int = 0, rows: int = ROWS) -> dict[str, np.ndarray]:
    generator = np.random.default_rng(seed)
    return {
        "tokens": generator.standard_normal((rows, 16, 8)).astype(np.float16),
        "labels": generator.integers(0, 5, rows).astype(np.int64),
    }


def toy_layout(arrays: dict[str, np.ndarray], rows_per_block: int = 0) -> dict[str, ArraySpec]:
    return {name: ArraySpec(a.shape, a.dtype, rows_per_block) for name, a in arrays.items()}


def toy_fill(arrays: dict[str, np.ndarray], *, batch: int = 7,
             between: Callable[[int], None] = lambda _: None) -> Callable[[dict[str, ArrayWriter]], dict[str, Any]]:
    """Writes ``arrays`` in batches of ``batch`` rows, calling ``between(i)`` before batch i."""

    def fill(writers: dict[str, ArrayWriter]) -> dict[str, Any]:
        rows = len(next(iter(arrays.values())))
        for i, start in enumerate(range(0, rows, batch)):
            between(i)
            for name, writer in writers.items():
                writer.write(arrays[name][start:start + batch])
        return {"grid": [4, 4], "note": "toy"}

    return fill


def build_toy(cache_dir: Path, key: dict[str, Any] | None = None, seed: int = 0, rows_per_block: int = 0,
              **fill_options: Any) -> tuple[Entry, bool]:
    arrays = toy_arrays(seed)
    return open_or_build(cache_dir, NAME, key or {"seed": seed}, toy_layout(arrays, rows_per_block),
                         toy_fill(arrays, **fill_options))


def read_all(entry: Entry) -> dict[str, np.ndarray]:
    return {name: np.array(array) for name, array in entry.arrays.items()}


def flip_byte(path: Path, offset_from_end: int) -> None:
    """Same-size corruption: invert one byte ``offset_from_end`` bytes before the end of ``path``."""
    with open(path, "r+b") as file:
        file.seek(-offset_from_end, 2)
        byte = file.read(1)
        file.seek(-offset_from_end, 2)
        file.write(bytes([byte[0] ^ 0xFF]))
