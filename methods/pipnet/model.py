"""PIP-Net (Nauta, Schlötterer, van Keulen, Seifert, CVPR 2023; official code ``M-Nauta/PIPNet``
@ 12c4da7) on frozen tokens.

Model (pipnet.py): add-on ``Linear(D→P)`` (a 1×1 conv: xavier-uniform weights, gain 1, default
bias; main.py:111-117) and a softmax over the P prototypes at every grid position (presences z),
max-pooled over the grid; a non-negative scoring sheet ``out = pooled · relu(W)ᵀ`` with
``W ~ N(1, 0.1²)``. On a frozen trunk the add-on always has weights (the official default P = D
with a parameter-free add-on would leave nothing to pretrain); ``expanded`` adds the appended
block, the analogue of the backbone stages the official code trains at ``lr_block``.

Schedule (main.py, train.py): ``pretrain`` (add-on [+ block]; align ramp e/E + 5·tanh), then
stage 2 of ``epochs`` epochs: ``finetune`` (the first 3: W only, 2·CE) and ``joint`` (W, add-on
[+ block]; 5·align + 2·tanh + 2·CE). After every stage-2 step W shrinks by 1e-3 (a proximal L1
step); at the start of stage-2 epochs 30 and the last it shrinks once more; after training,
relevant prototypes never present above 0.1 on the training split are zeroed. The per-iteration
cosine schedules are sampled at each epoch's centre and the classifier's Adam state restarts at
``joint`` (docs/protocol/pipnet.md).

Logits are the scoring sheet on inference-clamped pooled scores (the official prediction);
activation maps of class c are the presences of its J highest-weighted prototypes, scaled by
those weights.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import (PASS_BATCH_SIZE, block_groups, check_count, check_positive, head_input, head_reads,
                                    make_block)
from methods.pipnet.functional import (
    align_loss,
    clamp_for_inference,
    class_loss,
    cosine_factor,
    pooled_presences,
    presences,
    restart_factor,
    scoring_sheet,
    shrink_before_epoch,
    shrink_weights,
    tanh_loss,
    unused_prototypes,
)
from methods.registry import register_method

#: η_min of the classifier's warm restarts (main.py:180-183)
CLASSIFIER_ETA_MIN = 1e-3
#: the frozen ``normalization_multiplier`` m of NonNegLinear (main.py:117, args.py:197-198)
MULTIPLIER = 2.0
STAGE_TWO = ("finetune", "joint")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"pipnet: {message}")


@register_method("pipnet")
class PIPNet(PrototypeMethod):
    """PIP-Net's head on the frozen trunk's tokens (or on the appended block's, ``expanded=True``).

    Loss terms (``loss_weights``, train.py:40-49): ``align_pre`` (the pretraining alignment with
    its ramp e/E folded in, weight 1), ``tanh_pre`` (5), and in stage 2 ``align`` (5), ``tanh``
    (2), ``ce`` (2). ``view_dropout`` > 0 draws the two views as independent channel dropouts of
    the head's input (not official: docs/protocol/pipnet.md); 0 (default) aligns the view with itself.
    """

    def __init__(
        self,
        ctx: MethodContext,
        *,
        num_prototypes: int | None = None,
        pretrain_epochs: int = 10,
        epochs: int = 60,
        finetune_epochs: int = 3,
        classifier_lr: float = 0.05,
        add_on_lr: float = 5e-3,
        lr_block: float = 5e-4,
        align_weight: float = 5.0,
        tanh_weight: float = 2.0,
        ce_weight: float = 2.0,
        pretrain_tanh_weight: float = 5.0,
        test_shrinks_per_epoch: int = 0,
        bias: bool = False,
        view_dropout: float = 0.0,
        expanded: bool = False,
    ) -> None:
        super().__init__(ctx)
        prototypes = ctx.num_prototypes if num_prototypes is None else num_prototypes
        check_count("pipnet", minimum=ctx.prototypes_per_class, num_prototypes=prototypes)
        check_count("pipnet", pretrain_epochs=pretrain_epochs)
        check_count("pipnet", minimum=1, epochs=epochs)
        check_count("pipnet", finetune_epochs=finetune_epochs)
        _require(finetune_epochs <= epochs, f"finetune_epochs = {finetune_epochs} must be <= epochs = {epochs}")
        check_count("pipnet", test_shrinks_per_epoch=test_shrinks_per_epoch)
        check_positive("pipnet", classifier_lr=classifier_lr, add_on_lr=add_on_lr, lr_block=lr_block)
        _require(isinstance(view_dropout, (int, float)) and 0 <= view_dropout < 1,
                 f"view_dropout must be in [0, 1), got {view_dropout!r}")
        _require(isinstance(bias, bool), f"bias must be true or false, got {bias!r}")
        self.pretrain_epochs, self.epochs, self.finetune_epochs = pretrain_epochs, epochs, finetune_epochs
        self.classifier_lr, self.add_on_lr, self.lr_block = classifier_lr, add_on_lr, lr_block
        self.test_shrinks_per_epoch, self.view_dropout = test_shrinks_per_epoch, float(view_dropout)
        self.loss_weights = {"align_pre": 1.0, "tanh_pre": pretrain_tanh_weight, "align": align_weight,
                             "tanh": tanh_weight, "ce": ce_weight}

        self.block = make_block(ctx, expanded)
        self.reads = head_reads(self.block)
        self.add_on = nn.Linear(ctx.embed_dim, prototypes)
        nn.init.xavier_uniform_(self.add_on.weight, gain=nn.init.calculate_gain("sigmoid"))  # util/func.py:8-10
        self.weight = nn.Parameter(torch.empty(ctx.num_classes, prototypes).normal_(1.0, 0.1))  # main.py:114
        self.bias = nn.Parameter(torch.zeros(ctx.num_classes)) if bias else None
        self.register_buffer("multiplier", torch.tensor(MULTIPLIER))
        # prototypes the final pass over the training split switched off (diagnostic)
        self.register_buffer("zeroed", torch.zeros(prototypes, dtype=torch.bool))

    # ---- forward pieces ---------------------------------------------------------------------
    def _presences(self, head: Tensor) -> Tensor:
        return presences(self.add_on(head))

    def presence_maps(self, batch: TokenBatch) -> Tensor:
        """B×P×N softmax presences z (pipnet.py ``proto_features``)."""
        return self._presences(head_input(batch, self.block))

    def scores(self, batch: TokenBatch) -> Tensor:
        """B×P pooled presences, clamped for inference (pipnet.py:35-38)."""
        return clamp_for_inference(pooled_presences(self.presence_maps(batch)))

    def logits(self, batch: TokenBatch) -> Tensor:
        """The scoring sheet on clamped scores: its argmax is test.py:52's prediction."""
        return scoring_sheet(self.scores(batch), self.weight, self.bias)

    def class_prototypes(self, classes: Tensor) -> Tensor:
        """B×J: the J prototypes with the largest ``relu(W[c])`` of each class ``classes[b]``, in
        descending order (ties: lower index first), a fixed set per class."""
        order = torch.sort(self.weight.clamp_min(0.0), dim=1, descending=True, stable=True).indices
        return order[classes, :self.prototypes_per_class]

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The presence maps z of class ``classes[b]``'s top-J prototypes (vis_pipnet.py and
        visualize_prediction.py draw them), each scaled by the class's weight ``relu(W[c, p])``:
        the evidence for class c, whose grid max is the prototype's unclamped term of out_c. The
        map metrics are invariant to a map's positive scale; a weight of 0 gives a flat map (a
        prototype the class does not use), and two classes sharing a prototype get distinct maps."""
        H, W = batch.grid
        chosen = self.class_prototypes(classes)
        z = self.presence_maps(batch)
        present = z.gather(1, chosen[:, :, None].expand(-1, -1, z.shape[-1]))
        weights = self.weight.clamp_min(0.0)[classes].gather(1, chosen)
        return (weights[:, :, None] * present).view(len(batch), -1, H, W)

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """``relu(W[c, p]) · pooled'_p`` of the top-J prototypes of ``classes[b]``: terms of out_c."""
        chosen = self.class_prototypes(classes)
        weights = self.weight.clamp_min(0.0)[classes].gather(1, chosen)
        return weights * self.scores(batch).gather(1, chosen)

    # ---- training ---------------------------------------------------------------------------
    def _net_groups(self) -> list[ParamGroup]:
        """The add-on at ``add_on_lr`` (args.py: lr_block·10) and the block at ``lr_block``; wd 0."""
        return [ParamGroup("add_on", list(self.add_on.parameters()), self.add_on_lr),
                *block_groups(self.block, self.lr_block, 0.0)]

    def _classifier_groups(self) -> list[ParamGroup]:
        params = [self.weight] if self.bias is None else [self.weight, self.bias]
        return [ParamGroup("classifier", params, self.classifier_lr)]

    def stages(self) -> list[Stage]:
        """Adam with weight decay 0 (= the official AdamW with weight decay 0). Scheduler factors
        at each epoch's centre of the official per-iteration curves: the net's cosine to
        lr_block/100 over the pretraining (main.py:123) and over stage 2 (main.py:178, not stepped
        while fine-tuning), the classifier's warm restarts (T_0 = 5 if epochs <= 30 else 10,
        η_min = 1e-3; main.py:180-183) over stage 2. Without pretraining there is no fine-tuning
        either: main.py fine-tunes only ``if epoch <= 3 and (args.epochs_pretrain > 0 or …)``, so
        every stage-2 epoch is joint (its schedules start at the stage's first epoch)."""
        net, classifier = self._net_groups(), self._classifier_groups()
        eta_net = self.lr_block / 100
        period = 5 if self.epochs <= 30 else 10
        finetune_epochs = self.finetune_epochs if self.pretrain_epochs > 0 else 0
        joint_epochs = self.epochs - finetune_epochs

        def net_factor(group: ParamGroup, total: int):
            return lambda k: cosine_factor(group.lr, eta_net, k + 0.5, total)

        def classifier_factor(group: ParamGroup, offset: int):
            return lambda k: restart_factor(group.lr, CLASSIFIER_ETA_MIN, offset + k + 0.5, period)

        def schedule(factors):
            return lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, factors)

        return [
            Stage("pretrain", self.pretrain_epochs, net,
                  scheduler=schedule([net_factor(g, self.pretrain_epochs) for g in net])),
            Stage("finetune", finetune_epochs, classifier,
                  scheduler=schedule([classifier_factor(g, 0) for g in classifier])),
            Stage("joint", joint_epochs, [*classifier, *net],
                  scheduler=schedule([*(classifier_factor(g, finetune_epochs) for g in classifier),
                                      *(net_factor(g, self.epochs) for g in net)])),
        ]

    def _views(self, batch: TokenBatch, stage: Stage) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(z1, z2, pooled1, pooled2) of the two views; the same tensors when they are identical."""
        head = head_input(batch, self.block)
        if self.view_dropout == 0.0 or stage.name == "finetune":  # finetune reads only CE of fixed z
            z = self._presences(head)
            pooled = pooled_presences(z)
            return z, z, pooled, pooled
        z1 = self._presences(F.dropout(head, self.view_dropout, training=True))
        z2 = self._presences(F.dropout(head, self.view_dropout, training=True))
        return z1, z2, pooled_presences(z1), pooled_presences(z2)

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        z1, z2, pooled1, pooled2 = self._views(batch, stage)
        terms: dict[str, Tensor] = {}
        if stage.name == "pretrain":
            if self.uses("align_pre"):  # train.py:41: weight epoch/nr_epochs, epoch 1-based
                terms["align_pre"] = (epoch + 1) / self.pretrain_epochs * align_loss(z1, z2)
            if self.uses("tanh_pre"):
                terms["tanh_pre"] = tanh_loss(pooled1, pooled2)
            return terms
        if stage.name == "joint":
            if self.uses("align"):
                terms["align"] = align_loss(z1, z2)
            if self.uses("tanh"):
                terms["tanh"] = tanh_loss(pooled1, pooled2)
        if self.uses("ce"):
            out = scoring_sheet(torch.cat([pooled1, pooled2]), self.weight, self.bias)
            terms["ce"] = class_loss(out, torch.cat([batch.labels, batch.labels]), self.multiplier)
        return terms

    # ---- hooks ------------------------------------------------------------------------------
    def shrink(self) -> None:
        """train.py:89-94: ``W ← max(W − 1e-3, 0)``, ``m ← max(m, 1)``, ``b ← max(b, 0)``."""
        shrink_weights(self.weight.data, None if self.bias is None else self.bias.data, self.multiplier)

    def _stage_two_epoch(self, epoch: int) -> int:
        """1-based stage-2 epoch of global epoch ``epoch``."""
        return epoch - self.pretrain_epochs + 1

    def on_stage_start(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if stage.name in STAGE_TWO and self._stage_two_epoch(epoch) == 1 and shrink_before_epoch(1, self.epochs):
            self.shrink()

    def after_step(self, batch: TokenBatch, stage: Stage, epoch: int) -> None:
        if stage.name in STAGE_TWO:
            self.shrink()

    def on_epoch_end(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if stage.name not in STAGE_TWO:
            return
        done = self._stage_two_epoch(epoch)
        for _ in range(self.test_shrinks_per_epoch):  # test.py:49, once per test batch of eval_pipnet
            self.shrink()
        if done < self.epochs and shrink_before_epoch(done + 1, self.epochs):
            self.shrink()
        if done == self.epochs:
            self.zero_unused(data)

    @torch.no_grad()
    def zero_unused(self, data: TrainData) -> None:
        """main.py:268-280: ``W[:, p] = 0`` for relevant prototypes whose pooled presence never
        exceeds 0.1 on the un-augmented training split (the projection set), in eval mode."""
        training = self.training
        self.eval()
        best = torch.zeros_like(self.weight[0])
        for batch in data.batches(PASS_BATCH_SIZE):
            best = torch.maximum(best, self.scores(batch).amax(dim=0))
        self.train(training)
        unused = unused_prototypes(best, self.weight)
        self.weight.data[:, unused] = 0.0
        self.zeroed |= unused

    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """How sparse the scoring sheet ended: prototypes with a weight > 1e-3 to some class
        (vis_pipnet.py's relevant ones), non-zero weights, and those zeroed after training."""
        relevant = self.weight.amax(dim=0) > 1e-3
        return {"relevant_prototypes": int(relevant.sum()), "nonzero_weights": int((self.weight > 0).sum()),
                "zeroed_prototypes": int(self.zeroed.sum())}
