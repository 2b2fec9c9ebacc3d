"""Class-separable synthetic trunk outputs, for method tests and the contract checks (no images).

Each image has a foreground blob of patches whose tokens come from its class's J_true "part"
directions (one part per quadrant of the blob) plus noise; background patches are shared
clutter directions. The CLS attention peaks on the blob. ``block_input`` holds a CLS token
and the raw tokens; ``tokens`` is the frozen final norm of it, as a real trunk would give.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch
from timm.models.vision_transformer import Block
from torch import nn

from methods.base import TOKEN_FIELDS, MethodContext, TokenBatch, TrainData


class TinyAppendedBlock(nn.Module):
    """An identity-initialised ViT block + frozen LayerNorm, mapping B×(1+N)×D → B×N×D."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.block = Block(dim, num_heads=2)
        for layer in (self.block.attn.proj, self.block.mlp.fc2):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.block.parameters())

    def forward(self, block_input: torch.Tensor) -> torch.Tensor:
        return self.norm(self.block(block_input))[:, 1:]


class SyntheticTokens:
    """A TokenSource of synthetic tokens (same interface as benchmark.cache.tokens.TokenSource)."""

    def __init__(self, *, num_classes: int = 4, images_per_class: int = 12, dim: int = 32,
                 grid: tuple[int, int] = (6, 6), parts: int = 3, noise: float = 0.3, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        h, w = grid
        n = num_classes * images_per_class
        part_dirs = torch.randn(num_classes, parts, dim, generator=g)
        clutter = torch.randn(4, dim, generator=g)
        raw = clutter[torch.randint(0, 4, (n, h * w), generator=g)] + noise * torch.randn(n, h * w, dim, generator=g)
        attention = torch.full((n, h * w), 0.1)
        labels = torch.arange(num_classes).repeat_interleave(images_per_class)
        for i in range(n):
            top = int(torch.randint(0, h - 3, (1,), generator=g))
            left = int(torch.randint(0, w - 3, (1,), generator=g))
            for r in range(top, top + 3):
                for c in range(left, left + 3):
                    part = (r - top + c - left) % parts
                    raw[i, r * w + c] = part_dirs[labels[i], part] + noise * torch.randn(dim, generator=g)
                    attention[i, r * w + c] = 1.0
        attention = attention / attention.sum(1, keepdim=True)
        cls = torch.randn(n, 1, dim, generator=g)
        self.block_input = torch.cat([cls, raw], dim=1)
        self.tokens = nn.functional.layer_norm(self.block_input, (dim,))[:, 1:]
        self.attention = attention
        self.labels = labels
        self.grid = grid
        self.dim = dim
        self.num_classes = num_classes

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: torch.Tensor, device: torch.device | str = "cpu", *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        return TokenBatch(
            tokens=self.tokens[indices].to(device), block_input=self.block_input[indices].to(device),
            attention=self.attention[indices].to(device), labels=self.labels[indices].to(device),
            indices=indices.to(device), grid=self.grid, early_tokens=self.tokens[indices].to(device),
        ).only(reads)

    def context(self, prototypes_per_class: int, seed: int = 0) -> MethodContext:
        return MethodContext(
            num_classes=self.num_classes, prototypes_per_class=prototypes_per_class, embed_dim=self.dim,
            grid=self.grid, num_prefix_tokens=1, depth=4, make_block=lambda: TinyAppendedBlock(self.dim), seed=seed,
        )


class SyntheticTrainData(TrainData):
    """Images ``indices`` (default: all) of a SyntheticTokens source, in order, as the training
    split a hook sees; ``batch_size`` fixes the batch size whatever the caller asks."""

    def __init__(self, source: SyntheticTokens, indices: torch.Tensor | None = None,
                 batch_size: int | None = None, reads: frozenset[str] | None = None) -> None:
        self.source = source
        self.reads = TOKEN_FIELDS if reads is None else reads
        self.indices = torch.arange(len(source)) if indices is None else indices
        self.fixed_batch_size = batch_size

    def __len__(self) -> int:
        return len(self.indices)

    def batches(self, batch_size: int, *, shuffle: bool = False) -> Iterator[TokenBatch]:
        size = self.fixed_batch_size or batch_size
        for start in range(0, len(self.indices), size):
            yield self.source.batch(self.indices[start:start + size], reads=self.reads)
