"""A trained method on its live frozen trunk, as a function of pixels: images in [0, 1] →
the trunk's normalisation → the trunk (gradients flow back to the pixels; its weights stay frozen)
→ a :class:`methods.base.TokenBatch` → the method's logits, maps and contributions. The input-side
evaluations (PGD, Quantus' perturbations) call it; the method computes its own frozen features
from the live tokens (``batch.frozen`` empty, as ``methods/base.py`` allows)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from benchmark.backbones import FrozenTrunk
from benchmark.data import ImageDataset
from benchmark.run.prediction import block_output_reused
from methods.base import PrototypeMethod, TokenBatch
from methods.common.precision import autocast


class LiveMethod(nn.Module):
    """``method`` on ``trunk``; ``mean`` / ``std``: the trunk's normalisation of [0, 1] pixels."""

    def __init__(self, method: PrototypeMethod, trunk: FrozenTrunk, mean: tuple[float, ...], std: tuple[float, ...],
                 precision: str = "fp32") -> None:
        super().__init__()
        self.method = method
        self.trunk = trunk
        self.precision = precision
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)

    @contextmanager
    def compute(self) -> Iterator[None]:
        """The run's precision (bf16: autocast on the run's device type)."""
        with autocast(self.precision, self.mean.device):
            yield

    def tokens(self, pixels: Tensor, labels: Tensor) -> TokenBatch:
        """The live trunk's outputs of ``pixels`` (B×3×S×S in [0, 1]) as the method reads them."""
        out = self.trunk((pixels - self.mean) / self.std, gradients=torch.is_grad_enabled())
        batch = TokenBatch(tokens=out.tokens, block_input=out.block_input,
                           attention=out.attention,
                           labels=labels, indices=torch.arange(len(labels), device=labels.device),
                           grid=self.trunk.grid)
        return batch.only(self.method.reads)

    def forward(self, pixels: Tensor) -> Tensor:
        """B×C logits of ``pixels`` (the model Quantus calls)."""
        labels = torch.zeros(pixels.shape[0], dtype=torch.int64, device=pixels.device)
        with self.compute():
            return self.method.logits(self.tokens(pixels, labels)).float()

    def every_map(self, batch: TokenBatch) -> Tensor:
        """B×(C·J)×H×W: the maps of every prototype of every class (class-major, as methods/base.py);
        without gradients, the appended block run once for all C classes (``block_output_reused``)."""
        rows = []
        with torch.no_grad(), block_output_reused(self.method):
            for c in range(self.method.num_classes):
                classes = torch.full((len(batch),), c, dtype=torch.int64, device=batch.labels.device)
                rows.append(self.method.activation_maps(batch, classes).float())
        return torch.cat(rows, dim=1)


def pixel_images(dataset: ImageDataset, indices: list[int]) -> Tensor:
    """B×3×S×S [0, 1] pixels of the images at ``indices``: the dataset's transform without its final
    normalisation (benchmark/data/transforms.py: Resize → ToTensor → Normalize)."""
    steps = dataset.transform.transforms[:-1]
    rows = []
    for i in indices:
        image = dataset.load_image(i)
        for step in steps:
            image = step(image)
        rows.append(image)
    return torch.stack(rows)


def normalisation(dataset: ImageDataset) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The mean and std of the dataset's final Normalize (the trunk's)."""
    normalize = dataset.transform.transforms[-1]
    return tuple(float(v) for v in normalize.mean), tuple(float(v) for v in normalize.std)
