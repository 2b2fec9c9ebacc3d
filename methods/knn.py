"""Weighted k-NN (``knn``): DINO's k-NN evaluation on the frozen trunk's tokens, a black-box
reference row (Caron et al., "Emerging Properties in Self-Supervised Vision Transformers", ICCV
2021; official code ``facebookresearch/dino`` @ 04c0ad9, ``eval_knn.py``, after Wu et al. 2018).

"Training" stores the L2-normalised features of the un-augmented training split (the memory
bank, ``extract_features`` then ``nn.functional.normalize``); an image's features are normalised
the same way, its similarity to the bank is the dot product (cosine), its k most similar bank
entries vote for their class with weight ``exp(sim / T)`` and the logit of class c is the sum of
the votes for c (``knn_classifier``: ``probs``; k = 20, T = 0.07, the official defaults).

The map of class c: each final-norm patch token's cosine similarity to the retrieved neighbours
of class c (the top-k entries labelled c), averaged with their vote weights; a class that got no
vote reads its nearest bank entry instead. The J maps of a class are J copies of that map and
each copy carries 1/J of the class's votes (docs/protocol/knn.md).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from methods.base import MethodContext, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import PASS_BATCH_SIZE, check_count, check_positive
from methods.common.pooled import feature_width, frozen_final_norm, pooled_features
from methods.registry import register_method

#: the bank entries a vote reads: (indices B×k', weights exp(sim/T) B×k')
Neighbours = tuple[Tensor, Tensor]


@register_method("knn")
class WeightedKNN(PrototypeMethod):
    """DINO's weighted k-NN classifier: one ``fit`` stage that trains nothing; its
    ``on_stage_start`` stores the training split's normalised features."""

    reads = frozenset({"tokens", "block_input"})

    def __init__(self, ctx: MethodContext, *, pool: str = "cls", k: int = 20, temperature: float = 0.07) -> None:
        super().__init__(ctx)
        check_count("knn", minimum=1, k=k)
        check_positive("knn", temperature=temperature)
        self.pool, self.k, self.temperature = pool, k, float(temperature)
        self.final_norm = frozen_final_norm(ctx, "knn", pool)
        width = feature_width(ctx.embed_dim, pool)
        self.loss_weights = {"vote_error": 1.0}
        # placeholders until fitting replaces them: J random unit vectors per class (torch's seeded RNG)
        self.register_buffer("bank", F.normalize(torch.randn(ctx.num_prototypes, width), dim=1))
        self.register_buffer("bank_labels", torch.arange(ctx.num_classes).repeat_interleave(ctx.prototypes_per_class))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """The bank has as many rows as the training split: take the stored shape before loading."""
        for name in ("bank", "bank_labels"):
            stored = state_dict.get(prefix + name)
            if isinstance(stored, Tensor):
                setattr(self, name, torch.empty_like(stored, device=getattr(self, name).device))
        super()._load_from_state_dict(state_dict, prefix, *args)

    # ---- forward pieces ---------------------------------------------------------------------
    def features(self, batch: TokenBatch) -> Tensor:
        """B×D L2-normalised features (``nn.functional.normalize(features, dim=1, p=2)``)."""
        return F.normalize(pooled_features(batch, self.final_norm, self.pool), dim=1, p=2)

    def neighbours(self, batch: TokenBatch) -> Neighbours:
        """``similarity.topk(k, largest=True, sorted=True)`` of the cosine to the bank (k capped at
        the bank's size), and ``exp(sim / T)``."""
        similarity = self.features(batch) @ self.bank.t()
        sims, indices = similarity.topk(min(self.k, self.bank.shape[0]), dim=1, largest=True, sorted=True)
        return indices, (sims / self.temperature).exp()

    def votes(self, neighbours: Neighbours) -> Tensor:
        """B×C: Σ of the weights of the neighbours labelled c (``probs``)."""
        indices, weights = neighbours
        out = torch.zeros(indices.shape[0], self.num_classes, dtype=weights.dtype, device=weights.device)
        return out.scatter_add_(1, self.bank_labels[indices], weights)

    def logits(self, batch: TokenBatch) -> Tensor:
        return self.votes(self.neighbours(batch))

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """Per patch, the vote-weighted mean cosine to the retrieved neighbours of ``classes[b]``
        (its nearest bank entry when none was retrieved), as J copies (B×J×H×W)."""
        H, W = batch.grid
        features = self.features(batch)
        indices, weights = self.neighbours(batch)
        of_class = self.bank_labels[indices] == classes[:, None]  # B×k
        own_sims = (features @ self.bank.t()).masked_fill(self.bank_labels[None, :] != classes[:, None], -torch.inf)
        nearest_sim, nearest = own_sims.max(dim=1)  # the class's nearest entry, for a class without votes
        fallback = ~of_class.any(dim=1)
        chosen = torch.cat([indices, nearest[:, None]], dim=1)  # B×(k+1)
        weight = torch.cat([weights * of_class, ((nearest_sim / self.temperature).exp() * fallback)[:, None]], dim=1)
        tokens = F.normalize(batch.tokens.float(), dim=2)
        if self.pool == "cls+mean":  # the bank holds [cls, mean]: a patch token stands for the mean
            neighbours = self.bank[chosen][..., -self.ctx.embed_dim:]
        else:
            neighbours = self.bank[chosen]
        cosines = torch.einsum("bnd,bkd->bnk", tokens, F.normalize(neighbours, dim=2))
        maps = (cosines * weight[:, None, :]).sum(dim=2) / weight.sum(dim=1, keepdim=True)
        return maps.view(len(batch), 1, H, W).expand(-1, self.prototypes_per_class, -1, -1).contiguous()

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """1/J of the class's votes in each of its J (identical) slots: they sum to the logit."""
        rows = torch.arange(len(batch), device=classes.device)
        share = self.logits(batch)[rows, classes] / self.prototypes_per_class
        return share[:, None].expand(-1, self.prototypes_per_class).contiguous()

    # ---- "training": the memory bank ----------------------------------------------------------
    def stages(self) -> list[Stage]:
        return [Stage("fit", 1)]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        """Resubstitution error of the vote, 1 − votes(y)/Σ votes (each training image finds its
        own bank entry); reported, nothing descends on it."""
        if not self.uses("vote_error"):
            return {}
        votes = self.logits(batch)
        rows = torch.arange(len(batch), device=votes.device)
        return {"vote_error": (1 - votes[rows, batch.labels] / votes.sum(dim=1)).mean()}

    def on_stage_start(self, stage: Stage, epoch: int, data: TrainData) -> None:
        """Store the un-augmented training split's normalised features (``data``, in split order)."""
        features, labels = [], []
        for batch in data.batches(PASS_BATCH_SIZE):
            features.append(self.features(batch))
            labels.append(batch.labels)
        self.bank = torch.cat(features).to(self.bank.device)
        self.bank_labels = torch.cat(labels).to(self.bank_labels.device)
