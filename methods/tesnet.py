"""TesNet (Wang et al., ICCV 2021; official code ``JackeyWang96/TesNet``) on frozen tokens.

docs/protocol/tesnet.md: add-on ``Linear(D→64) → ReLU → Linear(64→64) → Sigmoid``; a basis of C·J
concept vectors (64-d), L2-renormalised after every optimiser step; logits from the last layer
on ``max_grid ⟨z, b̂⟩``; cluster/separation on ``−cos(z, b̂)``;
``L = CE + 0.8 Clst − 0.08 Sep + 1e-4 L1 + 1e-4 Orth − 1e-7 SubSep``. Epochs 0–4 warm (last layer
frozen), 5–19 joint (StepLR(5, 0.1) stepped before each joint epoch as in main.py: ×0.1 from
global epochs 9, 14, 19); one push at the end of global epoch 10 (settings_CUB.py:
``push_start = 10``, ``push_epochs = {0, 10}`` for 20 epochs) followed by 20 last-layer epochs,
after which joint training continues.
"""
from __future__ import annotations

import math
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
from methods.registry import register_method


def projections(latent: Tensor, basis: Tensor) -> Tensor:
    """``⟨z, b̂⟩`` with ``b̂ = b/‖b‖`` (model.py ``_project2basis``). latent B×N×K; basis P×K
    (→ B×P×N) or B×J×K, one set per image (→ B×J×N)."""
    return F.normalize(basis, dim=-1) @ latent.transpose(1, 2)


def class_projection_maps(latent: Tensor, basis: Tensor, classes: Tensor, per_class: int,
                          grid: tuple[int, int]) -> Tensor:
    """B×J×H×W projections ``⟨z, b̂⟩`` on the grid of the J = ``per_class`` basis vectors of
    ``classes[b]`` (class-major basis C·J×K): the activation map of TesNet and EvalProtoPNet."""
    chosen = basis.view(-1, per_class, basis.shape[-1])[classes]
    return projections(latent, chosen).view(len(latent), per_class, *grid)


def min_cosine_distances(projection: Tensor, latent: Tensor) -> Tensor:
    """B×P ``min_grid −cos(z, b̂) = −max_grid ⟨z, b̂⟩/‖z‖`` from the B×P×N projections and the B×N×K
    latent (model.py ``_cosine_convolution`` + ``global_min_pooling``): the distances of Clst/Sep."""
    return -(projection / latent.norm(dim=-1).clamp_min(1e-12)[:, None, :]).amax(dim=-1)


def orthogonality_cost(basis: Tensor, prototypes_per_class: int) -> Tensor:
    """``Orth = Σ_c ‖B_c B_cᵀ − I_J‖_1`` (entry-wise L1) on the raw C·J×K basis
    (train_and_test.py ``orth_cost``)."""
    per_class = basis.view(-1, prototypes_per_class, basis.shape[1])
    gram = per_class @ per_class.transpose(1, 2)
    return (gram - torch.eye(prototypes_per_class, device=basis.device, dtype=basis.dtype)).abs().sum()


def subspace_separation(basis: Tensor, prototypes_per_class: int) -> Tensor:
    """``SubSep = (1/√2) · ½ Σ_{c,c'} ‖Π_c − Π_c'‖_F`` with ``Π_c = B_cᵀB_c`` (train_and_test.py
    ``subspace_sep``), without the C×C×K×K tensor of projection operators:
    ``‖Π_c − Π_c'‖²_F = ‖B_cB_cᵀ‖²_F + ‖B_c'B_c'ᵀ‖²_F − 2‖B_cB_c'ᵀ‖²_F`` (expand the square,
    ``tr(Π_cΠ_c') = ‖B_cB_c'ᵀ‖²_F``), i.e. docs/protocol/tesnet.md's ``2J − 2‖B_cB_c'ᵀ‖²_F`` when each B_c has
    orthonormal rows, and exact for any basis. The c = c' terms are exactly 0 and left out, and
    the square root is taken of the value clamped at 1e-12, so the gradient stays finite when two
    classes span the same subspace (the official code adds 1e-10 inside the norm instead)."""
    classes = basis.shape[0] // prototypes_per_class
    gram = (basis @ basis.T).view(classes, prototypes_per_class, classes, prototypes_per_class)
    cross = gram.pow(2).sum(dim=(1, 3))  # C×C: ‖B_c B_c'ᵀ‖²_F
    self_terms = cross.diagonal()
    squared = self_terms[:, None] + self_terms[None, :] - 2 * cross
    same_class = torch.eye(classes, dtype=torch.bool, device=basis.device)
    distances = squared.clamp_min(1e-12).sqrt().masked_fill(same_class, 0.0)
    return 0.5 * distances.sum() / math.sqrt(2.0)


def basis_terms(method: PrototypeMethod, projection: Tensor, latent: Tensor, labels: Tensor) -> dict[str, Tensor]:
    """TesNet's ``clst`` and ``sep`` on ``min_grid −cos(z, b̂)`` and ``orth`` on the raw basis
    (train_and_test.py), each where ``method`` uses it; EvalProtoPNet's official code keeps them."""
    terms: dict[str, Tensor] = {}
    if method.uses("clst") or method.uses("sep"):
        min_distances = min_cosine_distances(projection, latent)
        if method.uses("clst"):
            terms["clst"] = cluster_cost(min_distances, labels, method.prototypes_per_class)
        if method.uses("sep"):
            terms["sep"] = separation_cost(min_distances, labels, method.prototypes_per_class)
    if method.uses("orth"):
        terms["orth"] = orthogonality_cost(method.basis, method.prototypes_per_class)
    return terms


def renormalise(basis: Tensor) -> None:
    """``b ← b/‖b‖`` after every optimiser step (train_and_test.py), in place."""
    basis.copy_(F.normalize(basis, dim=1))


@register_method("tesnet")
class TesNet(PrototypeMethod):
    """TesNet head on the frozen trunk's tokens (or on the appended block's, ``expanded=True``).

    Loss terms: ``ce``, ``clst`` and ``sep`` (on ``min_grid −cos``), ``orth`` (within-class
    orthonormality), ``subsep`` (subspace separation, negative weight) and ``l1`` (masked L1 of
    the last layer, used by the last-layer phase after the push: the warm and joint optimisers
    of main.py do not hold the last layer).
    """

    def __init__(
        self,
        ctx: MethodContext,
        *,
        basis_dim: int = 64,
        warm_epochs: int = 5,
        joint_epochs: int = 15,
        add_on_lr: float = 3e-3,
        basis_lr: float = 3e-3,
        add_on_weight_decay: float = 1e-3,
        joint_lr_step: int = 5,
        joint_lr_gamma: float = 0.1,
        joint_lr_curve_epochs: int | None = None,
        push_epochs: Sequence[int] = (10,),
        last_layer_epochs: int = 20,
        last_layer_lr: float = 1e-4,
        last_layer_batch_size: int = 128,
        clst_weight: float = 0.8,
        sep_weight: float = -0.08,
        l1_weight: float = 1e-4,
        orth_weight: float = 1e-4,
        subsep_weight: float = -1e-7,
        block_lr: float = 1e-4,
        block_weight_decay: float = 1e-3,
        expanded: bool = False,
    ) -> None:
        super().__init__(ctx)
        name = self.name
        check_count(name, minimum=1, basis_dim=basis_dim)
        check_positive(name, add_on_lr=add_on_lr, basis_lr=basis_lr)
        check_non_negative(name, add_on_weight_decay=add_on_weight_decay)
        check_finite(name, clst_weight=clst_weight, sep_weight=sep_weight, l1_weight=l1_weight,
                     orth_weight=orth_weight, subsep_weight=subsep_weight)
        self.schedule = WarmJoint.checked(name, warm_epochs=warm_epochs, joint_epochs=joint_epochs,
                                          joint_lr_step=joint_lr_step, joint_lr_gamma=joint_lr_gamma,
                                          joint_lr_curve_epochs=joint_lr_curve_epochs, block_lr=block_lr,
                                          block_weight_decay=block_weight_decay)
        self.last_layer_phase = LastLayerPhase.checked(name, last_layer_epochs=last_layer_epochs,
                                                       last_layer_lr=last_layer_lr,
                                                       last_layer_batch_size=last_layer_batch_size)
        self.push_epochs = check_epochs_in_schedule(name, "push_epochs", push_epochs, warm_epochs + joint_epochs)
        self.add_on_lr, self.basis_lr, self.add_on_weight_decay = add_on_lr, basis_lr, add_on_weight_decay
        # signed coefficients of settings_CUB.py ``coefs``
        self.loss_weights = {"ce": 1.0, "clst": clst_weight, "sep": sep_weight, "l1": l1_weight,
                             "orth": orth_weight, "subsep": subsep_weight}

        self.block = make_block(ctx, expanded)
        self.reads = head_reads(self.block)
        self.add_on = make_add_on((ctx.embed_dim, basis_dim, basis_dim))
        self.basis = init_prototypes(ctx.num_prototypes, basis_dim)
        self.last_layer = make_last_layer(ctx.num_classes, ctx.prototypes_per_class)
        register_push_records(self, ctx.num_prototypes)

    # ---- forward pieces ---------------------------------------------------------------------
    def latent(self, batch: TokenBatch) -> Tensor:
        """B×N×K add-on features z."""
        return self.add_on(head_input(batch, self.block))

    def pooled_projections(self, batch: TokenBatch) -> Tensor:
        """B×P ``max_grid ⟨z, b̂⟩`` (model.py ``forward``): what the last layer reads."""
        return projections(self.latent(batch), self.basis).amax(dim=-1)

    def logits(self, batch: TokenBatch) -> Tensor:
        return self.last_layer(self.pooled_projections(batch))

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The J last-layer terms of class ``classes[b]``'s logit from its own prototypes."""
        return last_layer_contributions(self.last_layer, self.pooled_projections(batch), classes)

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The projection ``⟨z, b̂⟩`` on the grid (docs/protocol/tesnet.md), for the J basis vectors of ``classes[b]``."""
        return class_projection_maps(self.latent(batch), self.basis, classes, self.prototypes_per_class, batch.grid)

    # ---- training ---------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """main.py: warm = add-on (wd 1e-3) + basis, last layer frozen; joint = the same + the
        trunk's features at 1e-4, wd 1e-3 (here the appended block when ``expanded``)."""
        return self.schedule.stages_of([
            ParamGroup("add_on", list(self.add_on.parameters()), self.add_on_lr, self.add_on_weight_decay),
            ParamGroup("basis", [self.basis], self.basis_lr),
        ], self.block)

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        latent = self.latent(batch)
        projection = projections(latent, self.basis)
        terms: dict[str, Tensor] = {}
        if self.uses("ce"):
            terms["ce"] = F.cross_entropy(self.last_layer(projection.amax(dim=-1)), batch.labels)
        terms.update(basis_terms(self, projection, latent, batch.labels))
        if self.uses("subsep"):
            terms["subsep"] = subspace_separation(self.basis, self.prototypes_per_class)
        return terms

    def after_step(self, batch: TokenBatch, stage: Stage, epoch: int) -> None:
        renormalise(self.basis)

    def on_epoch_end(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if epoch in self.push_epochs:
            push_then_last_layer(self, data, self.pooled_projections, self.last_layer_phase)

    def _latent_and_projection(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        latent = self.latent(batch)
        return latent, projections(latent, self.basis)

    @torch.no_grad()
    def push(self, data: TrainData) -> None:
        """Replace every basis vector by the latent patch of largest projection among training
        images of its class (push.py: ``push_forward`` distances are ``−⟨z, b̂⟩``), renormalised
        at once (the official code renormalises after the next optimiser step; every output
        reads b̂, so nothing differs), recording image index and grid position."""
        result = push_prototypes(data, self._latent_and_projection, self.prototypes_per_class)
        found = result.image_index >= 0
        self.basis.copy_(F.normalize(torch.where(found[:, None], result.vectors, self.basis), dim=1))
        self.push_image.copy_(result.image_index)
        self.push_position.copy_(result.position)
