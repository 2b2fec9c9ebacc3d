"""Deformable ProtoPNet (Donnelly et al., CVPR 2022; ``jdonnelly36/Deformable-ProtoPNet``) on a
frozen trunk's tokens, as docs/protocol/deformable_protopnet.md specifies.

Add-on ``Linear(D→D) → ReLU → Linear(D→D) → Sigmoid``; prototypes C·J × D × 2 × 2 read with
dilation 2 and padding 1 at offsets from ``Conv(D→128, 4×4, pad 1) → ReLU → Conv(128→8, 2×2,
pad 1)``; activation = ReLU(mean part cosine / 1.01) with norm-preserving sampling; last layer
fixed (+1 / −0.5); ``L = CE − 0.8 Clst + 0.08 Sep + 0.1 Orth`` on activations (Orth joint only),
training logits with the subtractive margin on wrong-class prototypes. Stages: warm (add-on,
prototypes) then joint (+ offsets, + the appended block in the expanded variant), StepLR(5, 0.2);
push after the epochs in ``push_epochs``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import (
    WarmJoint,
    head_reads,
    check_arg,
    check_count,
    check_epochs_in_schedule,
    check_finite,
    check_non_negative,
    check_positive,
    head_input,
    last_layer_contributions,
    make_add_on,
    make_block,
    make_last_layer,
    sampled_schedule,
    step_after_epoch,
    own_class_mask,
    push_prototypes,
    register_push_records,
)
from methods.deformable.functional import (
    KERNEL,
    NUM_PARTS,
    norm_preserving_sample,
    part_cosine,
    subtractive_margin,
    tap_positions,
    within_class_orthogonality,
)
from methods.registry import register_method

# Official cos_activation: features scaled to input_vector_length = 64, divided by √K. The offset
# net reads features at this scale and push copies parts at it.
FEATURE_SCALE = 64.0 / math.sqrt(NUM_PARTS)


@register_method("deformable_protopnet")
class DeformableProtoPNet(PrototypeMethod):
    """Deformable ProtoPNet head on the frozen trunk's tokens (or the appended block's, ``expanded``).

    Loss terms (``loss_weights``, signed as the official ``coefs``): ``ce`` cross-entropy of the
    margin logits, ``clst`` (−0.8) and ``sep`` (+0.08) on the max-pooled training activations,
    ``orth`` (+0.1, joint stage only) within-class orthogonality of the prototype parts.
    ``margin``: subtractive angular margin on wrong-class prototypes in the training logits;
    ``incorrect_class_connection``: the fixed last-layer weight to other classes; ``push_epochs``:
    0-based global epochs after whose training a push runs; ``offset_channels`` and
    ``offset_init_std``: the offset net's hidden width and its N(0, std²) re-initialisation at the
    start of joint training; ``expanded``: the head reads the appended block (docs/protocol/harness.md), which
    trains in the joint stage at ``block_lr``.
    """

    cuda_ops_without_deterministic_kernel = ("grid_sample backward (deformable pooling)",)

    def __init__(
        self,
        ctx: MethodContext,
        *,
        margin: float = 0.1,
        incorrect_class_connection: float = -0.5,
        clst_weight: float = -0.8,
        sep_weight: float = 0.08,
        orth_weight: float = 0.1,
        warm_epochs: int = 5,
        joint_epochs: int = 15,
        push_epochs: Sequence[int] = (10, 19),
        add_on_lr: float = 3e-3,
        prototype_lr: float = 3e-3,
        offset_lr: float = 1e-4,
        add_on_weight_decay: float = 1e-3,
        joint_lr_step: int = 5,
        joint_lr_gamma: float = 0.2,
        joint_lr_curve_epochs: int | None = None,
        offset_channels: int = 128,
        offset_init_std: float = 2e-5,
        block_lr: float = 1e-4,
        block_weight_decay: float = 1e-3,
        expanded: bool = False,
    ) -> None:
        super().__init__(ctx)
        name = self.name
        check_arg(isinstance(margin, (int, float)) and 0 <= margin < math.pi / 2, name, "margin",
                  "in [0, π/2) radians", margin)
        check_count(name, minimum=1, offset_channels=offset_channels)
        check_positive(name, add_on_lr=add_on_lr, prototype_lr=prototype_lr, offset_lr=offset_lr)
        check_non_negative(name, add_on_weight_decay=add_on_weight_decay, offset_init_std=offset_init_std)
        check_finite(name, incorrect_class_connection=incorrect_class_connection, clst_weight=clst_weight,
                     sep_weight=sep_weight, orth_weight=orth_weight)
        check_arg(min(ctx.grid) >= KERNEL, name, "the token grid", "at least 2×2", ctx.grid)
        self.schedule = WarmJoint.checked(name, warm_epochs=warm_epochs, joint_epochs=joint_epochs,
                                          joint_lr_step=joint_lr_step, joint_lr_gamma=joint_lr_gamma,
                                          joint_lr_curve_epochs=joint_lr_curve_epochs, block_lr=block_lr,
                                          block_weight_decay=block_weight_decay)
        self.push_epochs = check_epochs_in_schedule(name, "push_epochs", push_epochs, warm_epochs + joint_epochs)
        self.margin = margin
        self.add_on_lr, self.prototype_lr, self.offset_lr = add_on_lr, prototype_lr, offset_lr
        self.add_on_weight_decay = add_on_weight_decay
        self.offset_init_std = offset_init_std
        self.loss_weights = {"ce": 1.0, "clst": clst_weight, "sep": sep_weight, "orth": orth_weight}

        dim, num_prototypes = ctx.embed_dim, ctx.num_prototypes
        with torch.random.fork_rng(devices=[]):  # the initialisation is a function of ctx.seed alone
            torch.manual_seed(ctx.seed)
            self.add_on = make_add_on((dim, dim, dim))
            # docs/protocol/deformable_protopnet.md: prototypes uniform [0, 1), here C·J × D × 2 × 2
            self.prototypes = nn.Parameter(torch.rand(num_prototypes, dim, KERNEL, KERNEL))
            # official conv_offset with deformable_conv_hidden_channels=128: kernel (2+2)×(2+2) then 2×2,
            # both padding 1, so the offset map is H×W, aligned with the activation map
            self.offset_net = nn.Sequential(
                nn.Conv2d(dim, offset_channels, kernel_size=KERNEL + 2, padding=1), nn.ReLU(),
                nn.Conv2d(offset_channels, 2 * NUM_PARTS, kernel_size=KERNEL, padding=1),
            )
            self.block = make_block(ctx, expanded)  # last: same head init either way
            self.reads = head_reads(self.block)
        for conv in (self.offset_net[0], self.offset_net[2]):  # official: zero init
            nn.init.zeros_(conv.weight)
            nn.init.zeros_(conv.bias)
        # official run.sh: last_layer_fixed=True, incorrect_class_connection=-0.5; in no param group
        self.last_layer = make_last_layer(ctx.num_classes, ctx.prototypes_per_class,
                                          incorrect_class_connection).requires_grad_(False)
        # push records: source image (index in the training split, −1 = never pushed), flat cell
        # row·W + col of the activation map, the deformed (row, col) grid positions of the K parts
        register_push_records(self, num_prototypes)
        self.register_buffer("push_part_positions", torch.zeros(num_prototypes, NUM_PARTS, 2))

    # ---- forward pieces ------------------------------------------------------------------------
    def unit_features(self, batch: TokenBatch) -> Tensor:
        """B×D×H×W add-on features scaled to unit length per cell (sigmoid ⇒ non-negative)."""
        height, width = batch.grid
        z = F.normalize(self.add_on(head_input(batch, self.block)), dim=-1)
        return z.transpose(1, 2).reshape(len(batch), -1, height, width)

    def deformed_parts(self, unit: Tensor) -> tuple[Tensor, Tensor]:
        """Samples B×D×K×H×W of ``unit`` features at the deformed part positions, and those
        positions B×K×H×W×2; the offset net reads the features at ``FEATURE_SCALE``."""
        positions = tap_positions(self.offset_net(FEATURE_SCALE * unit))
        return norm_preserving_sample(unit, positions), positions

    def prototype_activations(self, batch: TokenBatch, labels: Tensor | None = None) -> Tensor:
        """B×M×H×W ReLU'd activations; with ``labels``, the training activations with the
        subtractive margin on the prototypes of the other classes."""
        samples, _ = self.deformed_parts(self.unit_features(batch))
        activations = part_cosine(samples, self.prototypes)
        if labels is not None and self.margin > 0:
            wrong = ~own_class_mask(labels, self.ctx.num_prototypes, self.prototypes_per_class)
            activations = subtractive_margin(activations, wrong, self.margin)
        return activations.relu()

    def logits(self, batch: TokenBatch) -> Tensor:
        """Marginless: max over the grid, then the fixed last layer (official ``marginless_logits``)."""
        return self.last_layer(self.pooled_activations(batch))

    def pooled_activations(self, batch: TokenBatch) -> Tensor:
        """B×P max over the grid of the deformable activations: what the last layer reads."""
        return self.prototype_activations(batch).amax(dim=(-2, -1))

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The J last-layer terms of class ``classes[b]``'s logit from its own prototypes."""
        return last_layer_contributions(self.last_layer, self.pooled_activations(batch), classes)

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The marginless ReLU'd mean part cosine of the J prototypes of ``classes[b]``."""
        samples, _ = self.deformed_parts(self.unit_features(batch))
        chosen = self.prototypes.view(self.num_classes, self.prototypes_per_class, *self.prototypes.shape[1:])
        return part_cosine(samples, chosen[classes]).relu()

    # ---- training ------------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        """main.py: warm = add-on (wd 1e-3) + prototypes; joint = the same + offsets (+ the block at
        ``block_lr``, wd 1e-3, in place of the trunk's features), StepLR stepped after each joint
        epoch (main.py calls ``joint_lr_scheduler.step()`` after ``tnt.train``), sampled at
        ``joint_epochs`` points of its ``joint_lr_curve_epochs``-epoch curve when compressed."""
        warm = [ParamGroup("add_on", list(self.add_on.parameters()), self.add_on_lr, self.add_on_weight_decay),
                ParamGroup("prototypes", [self.prototypes], self.prototype_lr)]
        joint = [*warm, ParamGroup("offsets", list(self.offset_net.parameters()), self.offset_lr),
                 *self.schedule.block_groups(self.block)]
        schedule = self.schedule
        return [
            Stage("warm", schedule.warm_epochs, warm),
            Stage("joint", schedule.joint_epochs, joint, scheduler=sampled_schedule(
                step_after_epoch(schedule.lr_step, schedule.lr_gamma), schedule.joint_epochs, schedule.lr_curve_epochs)),
        ]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        pooled = self.prototype_activations(batch, batch.labels).amax(dim=(-2, -1))  # B×M, max over the grid
        own = own_class_mask(batch.labels, self.ctx.num_prototypes, self.prototypes_per_class)
        terms: dict[str, Tensor] = {}
        if self.uses("ce"):
            terms["ce"] = F.cross_entropy(self.last_layer(pooled), batch.labels)
        # official train_and_test.py: max of (margin) activations × own / other-class mask, activations ≥ 0
        if self.uses("clst"):
            terms["clst"] = torch.where(own, pooled, 0.0).amax(dim=1).mean()
        if self.uses("sep"):
            terms["sep"] = torch.where(own, 0.0, pooled).amax(dim=1).mean()
        if stage.name == "joint" and self.uses("orth"):  # main.py: use_ortho_loss=True in joint epochs only
            terms["orth"] = within_class_orthogonality(self.prototypes, self.prototypes_per_class)
        return terms

    def on_stage_start(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if stage.name == "joint":  # official initialize_offset_weights at the first joint epoch
            for conv in (self.offset_net[0], self.offset_net[2]):
                nn.init.normal_(conv.weight, mean=0.0, std=self.offset_init_std)
                nn.init.zeros_(conv.bias)

    def on_epoch_end(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if epoch in self.push_epochs:  # no last-layer phase: the last layer is fixed
            self.push(data)

    # ---- push ----------------------------------------------------------------------------------
    def _cells_and_activations(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        """Per cell, the K deformed parts at ``FEATURE_SCALE`` and their K (row, col) positions,
        packed as B×N×(D·K + 2K); and the marginless activations B×M×N (official push_forward)."""
        samples, positions = self.deformed_parts(self.unit_features(batch))
        activations = part_cosine(samples, self.prototypes).relu().flatten(2)
        parts = FEATURE_SCALE * samples.flatten(1, 2).flatten(2).transpose(1, 2)  # B×N×(D·K)
        return torch.cat((parts, positions.permute(0, 2, 3, 1, 4).flatten(3).flatten(1, 2)), dim=-1), activations

    @torch.no_grad()
    def push(self, data: TrainData) -> None:
        """Replace each prototype by the deformed parts at the most activated cell among training
        images of its class (push.py), and record image, cell and part positions. The parts are the
        norm-preserving samples the activation compares with, copied at ``FEATURE_SCALE``."""
        training = self.training
        self.eval()  # push.py runs the network in eval mode
        result = push_prototypes(data, self._cells_and_activations, self.prototypes_per_class)
        found = result.image_index >= 0
        dim = self.ctx.embed_dim
        parts = result.vectors[:, :dim * NUM_PARTS].view_as(self.prototypes)
        self.prototypes.copy_(torch.where(found[:, None, None, None], parts, self.prototypes))
        self.push_image.copy_(torch.where(found, result.image_index, self.push_image))
        self.push_position.copy_(torch.where(found, result.position, self.push_position))
        positions = result.vectors[:, dim * NUM_PARTS:].view(-1, NUM_PARTS, 2)
        self.push_part_positions.copy_(torch.where(found[:, None, None], positions, self.push_part_positions))
        self.train(training)
