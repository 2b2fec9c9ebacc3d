"""A minimal adapter outside the suite, named by import path (``example_adapter:CosinePrototypes``).

The docs' "Adding a method" guide (docs/guides/adding-a-method.md) walks through this file: cosine prototypes on the frozen
tokens, max over the grid, summed per class.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch


class CosinePrototypes(PrototypeMethod):
    display_name = "Cosine prototypes"  # how reports label it (default: the class name)

    def __init__(self, ctx: MethodContext, *, epochs: int = 10, lr: float = 0.1, temperature: float = 0.1) -> None:
        super().__init__(ctx)
        self.epochs, self.lr, self.temperature = epochs, lr, temperature
        self.prototypes = nn.Parameter(torch.randn(ctx.num_prototypes, ctx.embed_dim))  # class-major
        self.loss_weights = {"ce": 1.0}

    def stages(self) -> list[Stage]:
        return [Stage("train", self.epochs, [ParamGroup("prototypes", [self.prototypes], self.lr)])]

    def _similarity(self, batch: TokenBatch) -> Tensor:
        """B×(C·J)×N cosine similarity of every prototype to every patch."""
        return torch.einsum("bnd,pd->bpn", F.normalize(batch.tokens, dim=-1), F.normalize(self.prototypes, dim=-1))

    def logits(self, batch: TokenBatch) -> Tensor:
        pooled = self._similarity(batch).amax(dim=-1)  # max over the grid
        return pooled.view(len(batch), self.num_classes, -1).sum(-1) / self.temperature

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        return {"ce": F.cross_entropy(self.logits(batch), batch.labels)}

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The logit is a sum over prototypes: each one's pooled similarity / temperature."""
        return self.activation_maps(batch, classes).flatten(2).amax(-1) / self.temperature

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        J, (H, W) = self.prototypes_per_class, batch.grid
        sim = self._similarity(batch).view(len(batch), self.num_classes, J, H, W)
        return sim[torch.arange(len(batch)), classes]
