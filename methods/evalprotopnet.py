"""EvalProtoPNet (Huang et al., ICCV 2023; official code ``hqhQAQ/EvalProtoPNet``) on frozen tokens.

docs/protocol/evalprotopnet.md: add-on ``Linear(D→64) → Sigmoid``; TesNet's renormalised basis and
orthogonality cost; score aggregation instead of a last layer,
``logit_c = Σ_j softmax(w_c)_j · J · max_grid ⟨z, b̂_cj⟩`` with ``w`` initialised to 1;
``L = CE + 0.8 Clst − 0.08 Sep + 1e-4 Orth + 0.5 SDFA`` (SDFA from the end of warm-up, margin
0.1). Epochs 0–4 warm (add-on 3e-3, basis 3e-3, aggregation weights 1e-6), 5–19 joint
(StepLR(3, 0.2) of scripts/train.sh, stepped before each joint epoch as in main.py: ×0.2 from
global epochs 7, 10, 13, 16, 19). No push.

**Decision** (docs/protocol/evalprotopnet.md): the trunk is frozen, so SDFA's deep self-similarity is taken on the
add-on output z and the shallow one (detached) on the tokens of frozen block ⌊depth/4⌋
(``batch.early_tokens``, cached because ``needs_early_tokens``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch
from methods.common.lineage import (
    WarmJoint,
    check_count,
    check_finite,
    check_non_negative,
    check_positive,
    head_input,
    head_reads,
    init_prototypes,
    make_add_on,
    make_block,
)
from methods.registry import register_method
from methods.tesnet import basis_terms, class_projection_maps, projections, renormalise


def aggregate_scores(pooled: Tensor, weights: Tensor) -> Tensor:
    """``logit_c = Σ_j softmax(w_c)_j · J · s_cj`` for B×(C·J) pooled scores and C×J weights
    (model.py ``forward_SA_module``)."""
    classes, per_class = weights.shape
    scale = F.softmax(weights, dim=1) * per_class
    return (pooled.view(-1, classes, per_class) * scale).sum(dim=-1)


def sdfa_cost(deep: Tensor, shallow: Tensor, rows: Tensor, margin: float) -> Tensor:
    """``mean relu(|S_deep[m_k, :] − S_shallow[m_k, :]| − margin)`` (model.py ``get_SDFA_loss``).

    ``S`` are the N×N cosine self-similarities of each image's tokens (deep B×N×K, shallow B×N×D,
    detached here); ``rows`` B×J are the grid positions m_k of the GT-class prototypes' maxima.
    Only the J selected rows are formed (B×J×N), never the full N×N matrices."""
    def selected_rows(features: Tensor) -> Tensor:
        unit = F.normalize(features, dim=-1)
        chosen = unit.gather(1, rows[:, :, None].expand(-1, -1, unit.shape[-1]))
        return chosen @ unit.transpose(1, 2)

    difference = selected_rows(deep) - selected_rows(shallow.detach())
    return F.relu(difference.abs() - margin).mean()


@register_method("evalprotopnet")
class EvalProtoPNet(PrototypeMethod):
    """EvalProtoPNet head on the frozen trunk's tokens (or on the appended block's, ``expanded=True``).

    Loss terms: ``ce``, ``clst`` and ``sep`` (on ``min_grid −cos(z, b̂)``), ``orth`` (TesNet's
    within-class orthonormality) and ``sdfa`` (self-similarity alignment; returned from global
    epoch ``warm_epochs`` on, as main.py's ``epoch >= warmup_epochs``).
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
        aggregation_lr: float = 1e-6,
        add_on_weight_decay: float = 1e-3,
        joint_lr_step: int = 3,
        joint_lr_gamma: float = 0.2,
        joint_lr_curve_epochs: int | None = None,
        sdfa_margin: float = 0.1,
        clst_weight: float = 0.8,
        sep_weight: float = -0.08,
        orth_weight: float = 1e-4,
        sdfa_weight: float = 0.5,
        block_lr: float = 1e-4,
        block_weight_decay: float = 1e-3,
        expanded: bool = False,
    ) -> None:
        super().__init__(ctx)
        name = self.name
        check_count(name, minimum=1, basis_dim=basis_dim)
        check_positive(name, add_on_lr=add_on_lr, basis_lr=basis_lr, aggregation_lr=aggregation_lr)
        check_non_negative(name, add_on_weight_decay=add_on_weight_decay, sdfa_margin=sdfa_margin)
        check_finite(name, clst_weight=clst_weight, sep_weight=sep_weight, orth_weight=orth_weight,
                     sdfa_weight=sdfa_weight)
        self.schedule = WarmJoint.checked(name, warm_epochs=warm_epochs, joint_epochs=joint_epochs,
                                          joint_lr_step=joint_lr_step, joint_lr_gamma=joint_lr_gamma,
                                          joint_lr_curve_epochs=joint_lr_curve_epochs, block_lr=block_lr,
                                          block_weight_decay=block_weight_decay)
        self.add_on_lr, self.basis_lr, self.aggregation_lr = add_on_lr, basis_lr, aggregation_lr
        self.add_on_weight_decay = add_on_weight_decay
        self.sdfa_margin = sdfa_margin
        # signed coefficients of main.py ``coefs`` with scripts/train.sh's consis_coe = 0.5
        self.loss_weights = {"ce": 1.0, "clst": clst_weight, "sep": sep_weight, "orth": orth_weight,
                             "sdfa": sdfa_weight}

        self.block = make_block(ctx, expanded)
        self.reads = head_reads(self.block) | {"early_tokens"}
        self.add_on = make_add_on((ctx.embed_dim, basis_dim))  # Linear(D→K) → Sigmoid
        self.basis = init_prototypes(ctx.num_prototypes, basis_dim)
        self.aggregation_weights = torch.nn.Parameter(torch.ones(ctx.num_classes, ctx.prototypes_per_class))

    # ---- forward pieces ---------------------------------------------------------------------
    def latent(self, batch: TokenBatch) -> Tensor:
        """B×N×K add-on features z."""
        return self.add_on(head_input(batch, self.block))

    def logits(self, batch: TokenBatch) -> Tensor:
        return aggregate_scores(projections(self.latent(batch), self.basis).amax(dim=-1), self.aggregation_weights)

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """``softmax(w_c)_j · J · maxproj_cj`` for c = ``classes[b]``: the J terms of its logit."""
        J = self.prototypes_per_class
        pooled = self.activation_maps(batch, classes).flatten(2).amax(dim=-1)  # B×J max projections
        return F.softmax(self.aggregation_weights[classes], dim=-1) * J * pooled

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The projection ``⟨z, b̂⟩`` on the grid (docs/protocol/evalprotopnet.md), for the J basis vectors of ``classes[b]``."""
        return class_projection_maps(self.latent(batch), self.basis, classes, self.prototypes_per_class, batch.grid)

    # ---- training ---------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """main.py: warm = add-on (wd 1e-3) + basis + aggregation weights; joint = the same + the
        trunk's features at 1e-4, wd 1e-3 (here the appended block when ``expanded``)."""
        return self.schedule.stages_of([
            ParamGroup("add_on", list(self.add_on.parameters()), self.add_on_lr, self.add_on_weight_decay),
            ParamGroup("basis", [self.basis], self.basis_lr),
            ParamGroup("aggregation", [self.aggregation_weights], self.aggregation_lr),
        ], self.block)

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        latent = self.latent(batch)
        projection = projections(latent, self.basis)  # B×P×N
        terms: dict[str, Tensor] = {}
        if self.uses("ce"):
            terms["ce"] = F.cross_entropy(aggregate_scores(projection.amax(dim=-1), self.aggregation_weights),
                                          batch.labels)
        terms.update(basis_terms(self, projection, latent, batch.labels))
        if self.uses("sdfa") and epoch >= self.schedule.warm_epochs:
            if batch.early_tokens is None:
                raise RuntimeError("evalprotopnet: SDFA needs the early block's tokens (batch.early_tokens); "
                                   "build the token cache with this method in the grid so it stores them")
            J = self.prototypes_per_class
            images = torch.arange(len(batch), device=projection.device)
            own = projection.view(len(batch), self.num_classes, J, -1)[images, batch.labels]  # B×J×N
            terms["sdfa"] = sdfa_cost(latent, batch.early_tokens, own.argmax(dim=-1), self.sdfa_margin)
        return terms

    def after_step(self, batch: TokenBatch, stage: Stage, epoch: int) -> None:
        renormalise(self.basis)
