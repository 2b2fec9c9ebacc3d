"""ProtoPNet (Chen et al., NeurIPS 2019; official code ``cfchen-duke/ProtoPNet``) on frozen tokens.

docs/protocol/protopnet.md: add-on ``Linear(D→128) → ReLU → Linear(128→128) → Sigmoid``, prototypes
C·J × 128, squared L2 distances on the grid, ``log((d + 1)/(d + 1e-4))`` of the min distance,
a last layer. ``L = CE + 0.8 Clst − 0.08 Sep + 1e-4 L1``. Epochs 0–4 warm, 5–19 joint
(StepLR(5, 0.1), stepped before each joint epoch as main.py does: ×0.1 from global epochs 9, 14,
19); a push at the end of epoch 10 and of epoch 19, each followed by 20 last-layer-only epochs
on the fixed pooled similarities.

``similarity = "cosine"`` swaps the head for ProtoPNeXt's (Willard, Moffett et al., arXiv
2406.14675; "Cosine similarity is almost all you need", WACV 2026): the cosine activation of
methods/common/cosine.py, max-pooled, and cluster/separation costs on similarities with the signs
of the weights flipped (ProtoPNeXt's coefficients −0.8 and +0.08 from the same 0.8 and −0.08);
the add-on, schedule, push and last-layer phases stay ProtoPNet's (docs/protocol/protopnet-cosine.md).

Schedule as main.py of the official code: ``for epoch …: train; if epoch >= push_start and
epoch in push_epochs: push; 20 × last-layer`` with ``push_start = 10``, so "push at epoch 10"
runs after the 11th training epoch (global index 10); the 20-epoch protocol adds the final push
after epoch 19. Both happen in ``on_epoch_end`` of those global epochs.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import (
    LastLayerPhase,
    WarmJoint,
    check_count,
    check_epochs_in_schedule,
    check_finite,
    check_non_negative,
    check_positive,
    cluster_cost,
    head_input,
    head_reads,
    init_prototypes,
    last_layer_contributions,
    make_add_on,
    make_block,
    make_last_layer,
    push_prototypes,
    push_then_last_layer,
    register_push_records,
    separation_cost,
)
from methods.common.cosine import cluster_similarity, cosine_activation, separation_similarity
from methods.common.precision import float32_island
from methods.registry import register_method

#: ε of the log similarity (official model.py ``self.epsilon``)
EPSILON = 1e-4
SIMILARITIES = ("l2", "cosine")


@float32_island  # ‖z‖² − 2z·p + ‖p‖² cancels to ≈ 0 at a close patch: in bf16 it errs by up to 0.3 (docs/guides/gpu.md)
def squared_distances(latent: Tensor, prototypes: Tensor) -> Tensor:
    """``d = ‖z − p‖²`` as ``‖z‖² − 2 z·p + ‖p‖²`` clamped at 0 (model.py ``_l2_convolution``, ReLU).

    latent B×N×K; prototypes P×K (→ B×P×N) or B×J×K, one set per image (→ B×J×N)."""
    cross = prototypes @ latent.transpose(1, 2)
    return (latent.pow(2).sum(-1)[:, None, :] - 2 * cross + prototypes.pow(2).sum(-1)[..., None]).clamp_min(0.0)


def log_similarity(distances: Tensor) -> Tensor:
    """``log((d + 1)/(d + ε))``, ε = 1e-4 (model.py ``distance_2_similarity``, 'log')."""
    return torch.log((distances + 1) / (distances + EPSILON))


@register_method("protopnet")
class ProtoPNet(PrototypeMethod):
    """ProtoPNet head on the frozen trunk's tokens (or on the appended block's, ``expanded=True``).

    Loss terms (``loss_weights``): ``ce`` cross-entropy, ``clst`` cluster cost, ``sep``
    separation cost (negative weight), ``l1`` masked L1 of the last layer. The last layer only
    trains in the last-layer phases after each push (the warm and joint optimisers of main.py do
    not hold it), so ``l1`` is used there and never returned by ``loss_terms``.
    """

    def __init__(
        self,
        ctx: MethodContext,
        *,
        prototype_dim: int = 128,
        warm_epochs: int = 5,
        joint_epochs: int = 15,
        add_on_lr: float = 3e-3,
        prototype_lr: float = 3e-3,
        add_on_weight_decay: float = 1e-3,
        joint_lr_step: int = 5,
        joint_lr_gamma: float = 0.1,
        joint_lr_curve_epochs: int | None = None,
        push_epochs: Sequence[int] = (10, 19),
        last_layer_epochs: int = 20,
        last_layer_lr: float = 1e-4,
        last_layer_batch_size: int = 128,
        clst_weight: float = 0.8,
        sep_weight: float = -0.08,
        l1_weight: float = 1e-4,
        similarity: str = "l2",
        block_lr: float = 1e-4,
        block_weight_decay: float = 1e-3,
        expanded: bool = False,
    ) -> None:
        super().__init__(ctx)
        name = self.name
        check_count(name, minimum=1, prototype_dim=prototype_dim)
        check_positive(name, add_on_lr=add_on_lr, prototype_lr=prototype_lr)
        check_non_negative(name, add_on_weight_decay=add_on_weight_decay)
        check_finite(name, clst_weight=clst_weight, sep_weight=sep_weight, l1_weight=l1_weight)
        if similarity not in SIMILARITIES:
            raise ValueError(f"{name}: similarity must be one of {', '.join(map(repr, SIMILARITIES))}, "
                             f"got {similarity!r}")
        self.schedule = WarmJoint.checked(name, warm_epochs=warm_epochs, joint_epochs=joint_epochs,
                                          joint_lr_step=joint_lr_step, joint_lr_gamma=joint_lr_gamma,
                                          joint_lr_curve_epochs=joint_lr_curve_epochs, block_lr=block_lr,
                                          block_weight_decay=block_weight_decay)
        self.last_layer_phase = LastLayerPhase.checked(name, last_layer_epochs=last_layer_epochs,
                                                       last_layer_lr=last_layer_lr,
                                                       last_layer_batch_size=last_layer_batch_size)
        self.similarity = similarity
        self.push_epochs = check_epochs_in_schedule(name, "push_epochs", push_epochs, warm_epochs + joint_epochs)
        self.add_on_lr, self.prototype_lr, self.add_on_weight_decay = add_on_lr, prototype_lr, add_on_weight_decay
        # signed coefficients of train_and_test.py / settings.py ``coefs``; on similarities the
        # costs change sign (ProtoPNeXt train_protopnet.py: cluster_coef −0.8, separation_coef 0.08)
        sign = -1.0 if similarity == "cosine" else 1.0
        self.loss_weights = {"ce": 1.0, "clst": sign * clst_weight, "sep": sign * sep_weight, "l1": l1_weight}

        self.block = make_block(ctx, expanded)
        self.reads = head_reads(self.block)
        self.add_on = make_add_on((ctx.embed_dim, prototype_dim, prototype_dim))
        self.prototypes = init_prototypes(ctx.num_prototypes, prototype_dim)
        self.last_layer = make_last_layer(ctx.num_classes, ctx.prototypes_per_class)
        register_push_records(self, ctx.num_prototypes)

    # ---- forward pieces ---------------------------------------------------------------------
    def latent(self, batch: TokenBatch) -> Tensor:
        """B×N×K add-on features z."""
        return self.add_on(head_input(batch, self.block))

    def pooled_similarities(self, batch: TokenBatch) -> Tensor:
        """B×P ``log_similarity(min_grid d)`` (model.py ``forward``), or the max cosine activation
        over the grid (ProtoPNeXt ``LinearClassPrototypePredictionHead``, top-1): what the last layer reads."""
        latent = self.latent(batch)
        if self.similarity == "cosine":
            return cosine_activation(latent, self.prototypes).amax(dim=-1)
        return log_similarity(squared_distances(latent, self.prototypes).amin(dim=-1))

    def logits(self, batch: TokenBatch) -> Tensor:
        return self.last_layer(self.pooled_similarities(batch))

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The J last-layer terms of class ``classes[b]``'s logit from its own prototypes."""
        return last_layer_contributions(self.last_layer, self.pooled_similarities(batch), classes)

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The log similarity (or the cosine activation) on the grid (docs/protocol/protopnet.md), for the J
        prototypes of ``classes[b]``."""
        J, (H, W) = self.prototypes_per_class, batch.grid
        chosen = self.prototypes.view(self.num_classes, J, -1)[classes]
        if self.similarity == "cosine":
            return cosine_activation(self.latent(batch), chosen).view(len(batch), J, H, W)
        return log_similarity(squared_distances(self.latent(batch), chosen)).view(len(batch), J, H, W)

    # ---- training ---------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """main.py: warm = add-on (wd 1e-3) + prototypes; joint = the same + the trunk's features
        at 1e-4, wd 1e-3 (here the appended block when ``expanded``), StepLR on the joint optimiser."""
        return self.schedule.stages_of([
            ParamGroup("add_on", list(self.add_on.parameters()), self.add_on_lr, self.add_on_weight_decay),
            ParamGroup("prototypes", [self.prototypes], self.prototype_lr),
        ], self.block)

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        if self.similarity == "cosine":
            return self._cosine_terms(batch)
        min_distances = squared_distances(self.latent(batch), self.prototypes).amin(dim=-1)
        terms: dict[str, Tensor] = {}
        if self.uses("ce"):
            terms["ce"] = F.cross_entropy(self.last_layer(log_similarity(min_distances)), batch.labels)
        if self.uses("clst"):
            terms["clst"] = cluster_cost(min_distances, batch.labels, self.prototypes_per_class)
        if self.uses("sep"):
            terms["sep"] = separation_cost(min_distances, batch.labels, self.prototypes_per_class)
        return terms

    def _cosine_terms(self, batch: TokenBatch) -> dict[str, Tensor]:
        """CE on the last layer of max-pooled cosine activations; clst/sep on those similarities
        (ProtoPNeXt losses.py ``ClusterCost``/``SeparationCost``)."""
        pooled = cosine_activation(self.latent(batch), self.prototypes).amax(dim=-1)
        terms: dict[str, Tensor] = {}
        if self.uses("ce"):
            terms["ce"] = F.cross_entropy(self.last_layer(pooled), batch.labels)
        if self.uses("clst"):
            terms["clst"] = cluster_similarity(pooled, batch.labels, self.prototypes_per_class)
        if self.uses("sep"):
            terms["sep"] = separation_similarity(pooled, batch.labels, self.prototypes_per_class)
        return terms

    def on_epoch_end(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if epoch in self.push_epochs:
            push_then_last_layer(self, data, self.pooled_similarities, self.last_layer_phase)

    def _latent_and_closeness(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        latent = self.latent(batch)
        if self.similarity == "cosine":  # ProtoPNeXt's projection: the max activation, the raw latent copied
            return latent, cosine_activation(latent, self.prototypes)
        return latent, -squared_distances(latent, self.prototypes)

    @torch.no_grad()
    def push(self, data: TrainData) -> None:
        """Replace every prototype by its nearest latent patch among training images of its class
        (push.py), recording the image index and grid position in ``push_image``/``push_position``."""
        result = push_prototypes(data, self._latent_and_closeness, self.prototypes_per_class)
        found = result.image_index >= 0
        self.prototypes.copy_(torch.where(found[:, None], result.vectors, self.prototypes))
        self.push_image.copy_(result.image_index)
        self.push_position.copy_(result.position)
