"""A tiny token source for the token-cache tests: six random images as the ``benchmark.data``
interface, a 2-block random trunk, and comparison of every field a source returns."""
from __future__ import annotations

import time

import numpy as np
import torch
from torch.utils.data import Dataset

from benchmark.backbones import FrozenTrunk, create_backbone

KEY = "dinov2_vits14_reg4"
SIZE = 112  # 8×8 grid: the cache does not care about the grid, and small is fast
COUNT = 6


class TinyDataset(Dataset):
    """The ``benchmark.data`` interface: ds[i] → (normalised image, label, index), labels, fingerprint()."""

    split = "train"

    def __init__(self, count: int = COUNT, seed: int = 0, *, fail_at: int | None = None, delay: float = 0.0) -> None:
        self.images = torch.randn(count, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))
        self.labels = np.arange(count, dtype=np.int64) % 3
        self.seed, self.fail_at, self.delay = seed, fail_at, delay

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        if index == self.fail_at:
            raise RuntimeError(f"unreadable image {index}")
        time.sleep(self.delay)
        return self.images[index], int(self.labels[index]), index

    def fingerprint(self) -> str:
        return f"tiny-{len(self)}-{self.seed}"


def tiny_trunk() -> FrozenTrunk:
    torch.manual_seed(0)
    return create_backbone(KEY, weights="random", image_size=SIZE, depth=2, embed_dim=32, num_heads=2)


def everything(source, device: str = "cpu") -> dict[str, torch.Tensor]:
    batch = source.batch(torch.arange(len(source)), device)
    fields = ("tokens", "block_input", "attention", "labels", "indices", "early_tokens")
    return {name: getattr(batch, name) for name in fields if getattr(batch, name) is not None}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol, msg=name)
