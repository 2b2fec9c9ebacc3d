"""Deformable ProtoPNet (Donnelly et al., CVPR 2022; ``jdonnelly36/Deformable-ProtoPNet``) on a
frozen trunk's tokens, as methods.md specifies.

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
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.errors import ProtobenchError
from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
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


def _require(condition: bool, name: str, requirement: str, value: object) -> None:
    if not condition:
        raise ProtobenchError(f"deformable_protopnet: {name} must be {requirement}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@register_method("deformable_protopnet")
class DeformableProtoPNet(PrototypeMethod):
    """Deformable ProtoPNet head (methods.md, "Deformable ProtoPNet").

    Hyperparameters (official defaults): ``margin`` subtractive angular margin on wrong-class
    prototypes in the training logits; ``incorrect_class_connection`` fixed last-layer weight to
    other classes; ``clst_coef``/``sep_coef``/``orth_coef`` signed loss coefficients (official
    ``coefs``: −0.8, 0.08, 0.1); ``warm_epochs``/``joint_epochs`` stage lengths; ``push_epochs``
    global 0-based epochs after whose training a push runs; learning rates and weight decays
    of the Adam groups; ``lr_step``/``lr_gamma`` the joint StepLR; ``offset_channels`` and
    ``offset_init_std`` the offset net's hidden width and its re-initialisation at the start of
    joint training; ``push_batch_size`` images per batch during push; ``expanded`` runs the head
    on the appended trainable block (protocol.md), which trains in the joint stage.
    """

    def __init__(
        self,
        ctx: MethodContext,
        *,
        margin: float = 0.1,
        incorrect_class_connection: float = -0.5,
        clst_coef: float = -0.8,
        sep_coef: float = 0.08,
        orth_coef: float = 0.1,
        warm_epochs: int = 5,
        joint_epochs: int = 15,
        push_epochs: Sequence[int] = (10, 19),
        lr_add_on: float = 3e-3,
        lr_prototypes: float = 3e-3,
        lr_offsets: float = 1e-4,
        lr_block: float = 1e-4,
        add_on_weight_decay: float = 1e-3,
        block_weight_decay: float = 1e-3,
        lr_step: int = 5,
        lr_gamma: float = 0.2,
        offset_channels: int = 128,
        offset_init_std: float = 2e-5,
        push_batch_size: int = 128,
        expanded: bool = False,
    ) -> None:
        super().__init__(ctx)
        _require(0 <= margin < math.pi / 2, "margin", "in [0, π/2) radians", margin)
        for name, count in (("warm_epochs", warm_epochs), ("joint_epochs", joint_epochs)):
            _require(_is_int(count) and count >= 0, name, "an integer ≥ 0", count)
        total_epochs = warm_epochs + joint_epochs
        _require(isinstance(push_epochs, (list, tuple)) and all(_is_int(e) and 0 <= e < total_epochs for e in push_epochs),
                 "push_epochs", f"a list of 0-based global epochs below the {total_epochs} training epochs", push_epochs)
        for name, rate in (("lr_add_on", lr_add_on), ("lr_prototypes", lr_prototypes), ("lr_offsets", lr_offsets),
                           ("lr_block", lr_block), ("lr_gamma", lr_gamma)):
            _require(rate > 0, name, "> 0", rate)
        for name, count in (("lr_step", lr_step), ("offset_channels", offset_channels),
                            ("push_batch_size", push_batch_size)):
            _require(_is_int(count) and count > 0, name, "an integer > 0", count)
        for name, value in (("add_on_weight_decay", add_on_weight_decay), ("block_weight_decay", block_weight_decay),
                            ("offset_init_std", offset_init_std)):
            _require(value >= 0, name, "≥ 0", value)
        _require(min(ctx.grid) >= KERNEL, "the token grid", "at least 2×2", ctx.grid)

        self.margin = margin
        self.warm_epochs, self.joint_epochs = warm_epochs, joint_epochs
        self.push_epochs = tuple(push_epochs)
        self.lr_add_on, self.lr_prototypes, self.lr_offsets, self.lr_block = lr_add_on, lr_prototypes, lr_offsets, lr_block
        self.add_on_weight_decay, self.block_weight_decay = add_on_weight_decay, block_weight_decay
        self.lr_step, self.lr_gamma = lr_step, lr_gamma
        self.offset_init_std = offset_init_std
        self.push_batch_size = push_batch_size
        self.loss_weights = {"ce": 1.0, "clst": clst_coef, "sep": sep_coef, "orth": orth_coef}

        dim, num_prototypes = ctx.embed_dim, ctx.num_prototypes
        with torch.random.fork_rng(devices=[]):  # initialisation is a function of ctx.seed alone
            torch.manual_seed(ctx.seed)
            self.add_on = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.Sigmoid())
            for layer in (self.add_on[0], self.add_on[2]):  # official _initialize_weights
                nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(layer.bias)
            # methods.md: prototypes init uniform [0, 1)
            self.prototypes = nn.Parameter(torch.rand(num_prototypes, dim, KERNEL, KERNEL))
            # official conv_offset with deformable_conv_hidden_channels=128: kernel (2+2)×(2+2) then 2×2,
            # both padding 1, so the offset map is H×W, aligned with the activation map; zero init.
            self.offset_net = nn.Sequential(
                nn.Conv2d(dim, offset_channels, kernel_size=KERNEL + 2, padding=1), nn.ReLU(),
                nn.Conv2d(offset_channels, 2 * NUM_PARTS, kernel_size=KERNEL, padding=1),
            )
            for conv in (self.offset_net[0], self.offset_net[2]):
                nn.init.zeros_(conv.weight)
                nn.init.zeros_(conv.bias)
            self.last_layer = nn.Linear(num_prototypes, ctx.num_classes, bias=False).requires_grad_(False)
            own = F.one_hot(self.prototype_class_identity(), ctx.num_classes).T.float()  # C×M
            with torch.no_grad():  # official set_last_layer_incorrect_connection; never trains
                self.last_layer.weight.copy_(own + incorrect_class_connection * (1 - own))
            self.block = ctx.make_block() if expanded else None  # last: the head's init is the same either way
        # the block's trainable parameters, fixed now (the training loop toggles requires_grad later)
        self._block_param_names = ([] if self.block is None else
                                   [n for n, p in self.block.named_parameters() if p.requires_grad])

        self.register_buffer("prototype_class", self.prototype_class_identity(), persistent=False)
        # push records: source image (index in the training split, −1 = never pushed), activation-map
        # cell (row, col), the deformed (row, col) grid positions of the K parts, and the activation
        self.register_buffer("push_image", torch.full((num_prototypes,), -1, dtype=torch.long))
        self.register_buffer("push_cell", torch.full((num_prototypes, 2), -1, dtype=torch.long))
        self.register_buffer("push_part_positions", torch.zeros(num_prototypes, NUM_PARTS, 2))
        self.register_buffer("push_activation", torch.zeros(num_prototypes))

    # ---- forward pieces ------------------------------------------------------------------------
    def unit_features(self, batch: TokenBatch) -> Tensor:
        """B×D×H×W add-on features scaled to unit length per cell (sigmoid ⇒ non-negative)."""
        tokens = batch.tokens if self.block is None else self.block(batch.block_input)
        height, width = batch.grid
        z = F.normalize(self.add_on(tokens), dim=-1)
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
            wrong = self.prototype_class[None, :] != labels[:, None]
            activations = subtractive_margin(activations, wrong, self.margin)
        return activations.relu()

    # ---- the adapter interface -----------------------------------------------------------------
    def stages(self) -> list[Stage]:
        def head() -> list[ParamGroup]:
            return [ParamGroup("add_on", list(self.add_on.parameters()), self.lr_add_on, self.add_on_weight_decay),
                    ParamGroup("prototypes", [self.prototypes], self.lr_prototypes)]

        joint = [*head(), ParamGroup("offsets", list(self.offset_net.parameters()), self.lr_offsets)]
        if self.block is not None:
            named = dict(self.block.named_parameters())
            joint.append(ParamGroup("block", [named[n] for n in self._block_param_names], self.lr_block,
                                    self.block_weight_decay))
        return [
            Stage("warm", self.warm_epochs, head()),
            Stage("joint", self.joint_epochs, joint,
                  scheduler=partial(torch.optim.lr_scheduler.StepLR, step_size=self.lr_step, gamma=self.lr_gamma)),
        ]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        pooled = self.prototype_activations(batch, batch.labels).amax(dim=(-2, -1))  # B×M, max over the grid
        terms = {"ce": F.cross_entropy(self.last_layer(pooled), batch.labels)}
        own = self.prototype_class[None, :] == batch.labels[:, None]
        # official train_and_test.py: max over own / other-class prototypes of the (margin) activations
        if self.uses("clst"):
            terms["clst"] = torch.where(own, pooled, 0.0).amax(dim=1).mean()
        if self.uses("sep"):
            terms["sep"] = torch.where(own, 0.0, pooled).amax(dim=1).mean()
        if stage.name == "joint" and self.uses("orth"):
            terms["orth"] = within_class_orthogonality(self.prototypes, self.prototypes_per_class)
        return terms

    def logits(self, batch: TokenBatch) -> Tensor:
        return self.last_layer(self.prototype_activations(batch).amax(dim=(-2, -1)))

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        samples, _ = self.deformed_parts(self.unit_features(batch))
        chosen = self.prototypes.view(self.num_classes, self.prototypes_per_class, *self.prototypes.shape[1:])[classes]
        return part_cosine(samples, chosen).relu()

    def on_stage_start(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if stage.name == "joint":  # official initialize_offset_weights
            with torch.no_grad():
                for conv in (self.offset_net[0], self.offset_net[2]):
                    nn.init.normal_(conv.weight, mean=0.0, std=self.offset_init_std)
                    nn.init.zeros_(conv.bias)

    def on_epoch_end(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if epoch in self.push_epochs:
            self.push(data)

    # ---- push -----------------------------------------------------------------------------------
    @torch.no_grad()
    def push(self, data: TrainData) -> None:
        """Replace each prototype by the deformed parts at the most activated cell of the training
        images of its own class (marginless activation, strict improvement over earlier batches as
        official push.py), copied at ``FEATURE_SCALE``; record image, cell and part positions.
        Prototypes of a class without training images stay as they are."""
        was_training = self.training
        self.eval()
        num_prototypes = self.ctx.num_prototypes
        device = self.prototypes.device
        best = torch.full((num_prototypes,), -math.inf, device=device)
        parts = self.prototypes.detach().flatten(2).clone()  # M×D×K
        image, cell = self.push_image.clone(), self.push_cell.clone()
        part_positions = self.push_part_positions.clone()
        for batch in data.batches(self.push_batch_size, shuffle=False):
            samples, positions = self.deformed_parts(self.unit_features(batch))
            activations = part_cosine(samples, self.prototypes).relu()  # B×M×H×W
            height, width = activations.shape[-2:]
            same_class = self.prototype_class[None, :] == batch.labels[:, None]  # B×M
            scores = activations.flatten(2).masked_fill(~same_class[..., None], -math.inf)
            value, flat = scores.transpose(0, 1).reshape(num_prototypes, -1).max(dim=1)  # over (image, cell)
            b, position = flat // (height * width), flat % (height * width)
            y, x = position // width, position % width
            better = value > best
            best = torch.where(better, value, best)
            parts[better] = FEATURE_SCALE * samples[b, :, :, y, x][better]
            image[better] = batch.indices[b][better].to(image.dtype)
            cell[better] = torch.stack((y, x), dim=1)[better]
            part_positions[better] = positions[b, :, y, x][better]
        self.prototypes.copy_(parts.view_as(self.prototypes))
        self.push_image.copy_(image)
        self.push_cell.copy_(cell)
        self.push_part_positions.copy_(part_positions)
        self.push_activation.copy_(torch.where(best > -math.inf, best, self.push_activation))
        self.train(was_training)
