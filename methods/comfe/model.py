"""The ComFe adapter (Mannix, Hodgkinson, Bondell, "ComFe: An Interpretable Head for Vision
Transformers", arXiv 2403.04125 / TMLR 2025; official code ``emannix/comfe-component-features``
@ 2feeb21: ``goo/networks/clustering/comfe_head.py`` (``head:LINE``),
``goo/methods/interpretable/comfe.py`` (``meth:LINE``), the released DINOv2 config
``configs/R/experiment/comfe_dinov2_vits_14_torchvision_flowers.yaml`` (``exp:LINE``)).

ComFe reads the frozen trunk's final-norm patch tokens (meth:92-103) and trains one head stage:
AdamW (wd 0.05, none on biases), a per-step warmup-cosine learning rate and gradient-norm
clipping at 0.01 (exp:19-20). J = class prototypes per class (``k``); the Q image prototypes
and the G background prototypes are extra. Class scores are probabilities (max over patches of
the composed soft assignments), not softmax logits; their argmax is the official prediction.

Two views: the official batch is [view 1; view 2] of each image (meth:60-61). Cached tokens have
no photometric pairs, so with ``views = 2`` the token batch is duplicated and the halves differ
by the decoder's dropout (docs/protocol/comfe.md); ``views = 1`` trains on one
copy without ``patch_consistency``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData, WarmupCosine
import methods.comfe.losses as losses
from methods.comfe.explain import nearest_exemplars, present_prototypes
from methods.comfe.head import ComFeHead
from methods.comfe.losses import LOSS_TERMS, Level
from methods.common.lineage import check_arg, check_count, check_non_negative, check_positive
from methods.common.precision import float32_island
from methods.registry import register_method

NAME = "comfe"
STAGE = "head"
#: the released config's loss switches (exp:44-49): class_contrast off
DEFAULT_TERMS = ("pyz", "pyp", "pz", "image_contrast", "patch_consistency")
#: images per forward pass of the diagnostics' pass over the training split (memory only)
PASS_BATCH_SIZE = 128


@register_method(NAME)
class ComFe(PrototypeMethod):
    """ComFe head (defaults: the released config, ``exp:15-57``).

    ``epochs`` of the one stage; ``image_prototypes`` Q; ``background_prototypes`` G (None: J·C,
    the config's 306 = 3·102 for Flowers); ``background_class`` the extra class column;
    ``temp_pred`` τ1, ``temp_class`` τ2, ``temp_contrastive`` τc; ``label_smoothing`` ε of the
    membership matrix; ``layers``, ``heads``, ``feedforward_dim``, ``dropout`` of the decoder;
    ``terms`` the loss terms that train (any of pyz, pyp, pz, image_contrast, patch_consistency,
    class_contrast); ``views`` 2 (duplicated tokens) or 1; ``lr`` the AdamW reference rate with
    ``start_lr`` / ``final_lr`` and ``warmup_epochs`` / ``cosine_end`` of the per-step schedule;
    ``weight_decay``; ``clip_grad_norm``.
    """

    reads = frozenset({"tokens"})

    def __init__(
        self,
        ctx: MethodContext,
        *,
        epochs: int = 50,
        image_prototypes: int = 5,
        background_prototypes: int | None = None,
        background_class: bool = True,
        temp_pred: float = 0.1,
        temp_class: float = 0.02,
        temp_contrastive: float = 0.02,
        label_smoothing: float = 0.1,
        layers: int = 2,
        heads: int = 8,
        feedforward_dim: int = 2048,
        dropout: float = 0.1,
        terms: Sequence[str] = DEFAULT_TERMS,
        views: int = 2,
        lr: float = 5e-4,
        start_lr: float = 5e-5,
        final_lr: float = 5e-6,
        warmup_epochs: int = 10,
        cosine_end: float = 0.8,
        weight_decay: float = 0.05,
        clip_grad_norm: float = 0.01,
    ) -> None:
        super().__init__(ctx)
        check_count(NAME, epochs=epochs)
        check_count(NAME, minimum=1, image_prototypes=image_prototypes, layers=layers, heads=heads,
                    feedforward_dim=feedforward_dim)
        check_positive(NAME, temp_pred=temp_pred, temp_class=temp_class, temp_contrastive=temp_contrastive,
                       lr=lr, start_lr=start_lr, final_lr=final_lr, clip_grad_norm=clip_grad_norm)
        check_count(NAME, warmup_epochs=warmup_epochs)
        check_non_negative(NAME, weight_decay=weight_decay)
        check_arg(isinstance(label_smoothing, (int, float)) and 0.0 <= label_smoothing < 1.0, NAME,
                  "label_smoothing", "a number in [0, 1)", label_smoothing)
        check_arg(isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0, NAME, "dropout", "a number in [0, 1)",
                  dropout)
        check_arg(isinstance(cosine_end, (int, float)) and 0.0 < cosine_end <= 1.0, NAME, "cosine_end",
                  "a fraction in (0, 1]", cosine_end)
        check_arg(isinstance(background_class, bool), NAME, "background_class", "true or false", background_class)
        check_arg(views in (1, 2), NAME, "views", "1 or 2", views)
        check_arg(ctx.embed_dim % heads == 0, NAME, "heads", f"a divisor of the trunk width {ctx.embed_dim}", heads)
        unknown = sorted(set(terms) - set(LOSS_TERMS))
        check_arg(not unknown and len(set(terms)) > 0, NAME, "terms",
                  f"a non-empty list of {', '.join(LOSS_TERMS)} (unknown: {', '.join(unknown) or 'none'})", list(terms))
        if views == 1 and "patch_consistency" in terms:
            raise ValueError(f"{NAME}: patch_consistency pairs the two views of an image and views = 1 has one; "
                             "drop it from terms or set views = 2")
        if background_prototypes is None:
            background_prototypes = ctx.prototypes_per_class * ctx.num_classes if background_class else 0
        check_count(NAME, background_prototypes=background_prototypes)
        check_arg(background_class or background_prototypes == 0, NAME, "background_prototypes",
                  "0 without the background class", background_prototypes)
        self.epochs, self.views, self.lr, self.weight_decay = epochs, views, lr, weight_decay
        self.temp_class, self.temp_contrastive = temp_class, temp_contrastive
        self.background_class, self.label_smoothing = background_class, label_smoothing
        self.schedule = WarmupCosine(warmup_epochs, start_lr / lr, final_lr / lr, cosine_end)
        self.clip_grad_norm = clip_grad_norm
        self.loss_weights = {term: 1.0 if term in terms else 0.0 for term in LOSS_TERMS}  # meth:69: all weights 1

        member = losses.membership(ctx.num_classes, ctx.prototypes_per_class, background_prototypes,
                                   background_class, label_smoothing)
        self.register_buffer("member", member)
        with torch.random.fork_rng(devices=[]):  # initialisation is a function of ctx.seed alone
            torch.manual_seed(ctx.seed)
            self.head = ComFeHead(dim=ctx.embed_dim, tokens=ctx.grid[0] * ctx.grid[1], queries=image_prototypes,
                                  class_rows=member.shape[0], layers=layers, heads=heads,
                                  feedforward_dim=feedforward_dim, dropout=dropout, temp_pred=temp_pred)

    # ---- forward ---------------------------------------------------------------------------------
    @property
    def total_classes(self) -> int:
        return self.member.shape[1]

    @float32_island
    def forward_levels(self, tokens: Tensor) -> list[Level]:
        """Every level's assignments and scores on B'×N×D tokens (head:237-367)."""
        if tokens.shape[1] != self.head.decoder_positional_encoding.shape[1]:
            raise ValueError(f"{NAME}: the head was built for {self.head.decoder_positional_encoding.shape[1]} "
                             f"patch tokens (its positional encoding) and got {tokens.shape[1]}")
        return [losses.level_outputs(z, l, self.head.cluster_class, self.member, self.temp_class)
                for z, l in self.head.levels(tokens)]

    def last_level(self, batch: TokenBatch) -> Level:
        return self.forward_levels(batch.tokens)[-1]

    def logits(self, batch: TokenBatch) -> Tensor:
        """s[:, :C] of the last level (meth:72-78): per-class probabilities, background dropped."""
        return self.last_level(batch).scores[:, :self.num_classes]

    def _class_maps(self, level: Level, classes: Tensor) -> Tensor:
        """B×J×N: A^(j)_bn = Σ_q A_bnq R_bq,row(c_b, j) — the assignment maps through each class prototype."""
        j = torch.arange(self.prototypes_per_class, device=classes.device)
        rows = losses.class_prototype_row(classes[:, None], j[None, :], self.num_classes, self.background_class)
        routed = torch.gather(level.class_assignment, 2, rows[:, None, :].expand(-1, level.class_assignment.shape[1], -1))
        return torch.einsum("bnq,bqj->bjn", level.assignment, routed)

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The image-prototype assignment maps pushed through the J class prototypes of ``classes[b]``
        (exact: P_bnc = (1 − ε)·Σ_j A^(j)_bn + ε/T)."""
        return self._class_maps(self.last_level(batch), classes).reshape(len(batch), -1, *batch.grid)

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """(1 − ε)·A^(j) at the patch n* = argmax_n P_bnc: they sum to the class score − ε/T."""
        level = self.last_level(batch)
        maps = self._class_maps(level, classes)
        best = level.patch_classes.gather(2, classes[:, None, None].expand(-1, maps.shape[2], 1)).argmax(dim=1)
        return (1.0 - self.label_smoothing) * maps.gather(2, best[:, None, :].expand(-1, maps.shape[1], 1))[..., 0]

    def logits_without(self, batch: TokenBatch, classes: Tensor, off: Tensor) -> Tensor:
        """Class c's patch probabilities less (1 − ε)·Σ_{j off} A^(j), then the max over patches;
        the other classes untouched."""
        level = self.last_level(batch)
        maps = self._class_maps(level, classes)  # B×J×N
        removed = (1.0 - self.label_smoothing) * torch.where(off[:, :, None], maps, torch.zeros_like(maps)).sum(1)
        patch = level.patch_classes.gather(2, classes[:, None, None].expand(-1, maps.shape[2], 1))[..., 0]
        logits = level.scores[:, :self.num_classes].clone()
        logits[torch.arange(len(batch), device=classes.device), classes] = (patch - removed).amax(dim=1)
        return logits

    # ---- training ------------------------------------------------------------------------------
    def parameter_groups(self) -> list[ParamGroup]:
        """AdamW groups (goo/optimizer/parameter_groups.py:18-57): no weight decay for parameter
        names containing 'bias' or 'bn', ``weight_decay`` for every other (norms, tables included)."""
        decay, no_decay = [], []
        for name, parameter in self.head.named_parameters():
            (no_decay if "bias" in name or "bn" in name else decay).append(parameter)
        return [ParamGroup("decay", decay, self.lr, self.weight_decay), ParamGroup("no_decay", no_decay, self.lr, 0.0)]

    def stages(self) -> list[Stage]:
        return [Stage(STAGE, self.epochs, self.parameter_groups(), optimizer="adamw", step_schedule=self.schedule,
                      clip_grad_norm=self.clip_grad_norm)]

    def training_rows(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        """Tokens and labels of a training batch: [tokens; tokens] and the labels repeated with two views (meth:60-61)."""
        if self.views == 1:
            return batch.tokens, batch.labels
        return torch.cat([batch.tokens, batch.tokens]), batch.labels.repeat(2)

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        """Each used term averaged over the L+1 levels (head:418-424), on the 2B-row batch."""
        tokens, labels = self.training_rows(batch)
        levels = self.forward_levels(tokens)
        y = losses.targets(labels, self.num_classes, self.background_class)
        per_level = {
            "pyz": lambda level: losses.pyz(level, y),
            "pyp": lambda level: losses.pyp(level, y),
            "pz": losses.pz,
            "image_contrast": lambda level: losses.image_contrast(level, self.temp_contrastive),
            "patch_consistency": losses.patch_consistency,
        }
        terms = {name: torch.stack([term(level) for level in levels]).mean()
                 for name, term in per_level.items() if self.uses(name)}
        if self.uses("class_contrast"):  # level-independent: its level mean is the value itself
            terms["class_contrast"] = losses.class_contrast(self.head.cluster_class, self.temp_contrastive)
        return terms

    # ---- diagnostics -----------------------------------------------------------------------------
    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """The explanation path over the training split (meth:110-226, eval mode): ``present_prototypes``
        mean and min image prototypes present per image; ``background_share`` of present prototypes
        labelled background; ``exemplar_similarity`` mean and min over the classes' prototypes of the
        inner product with their nearest present image prototype (the exemplar search)."""
        data = splits.get("train")
        if data is None or len(data) == 0:
            return {}
        was_training = self.training
        self.eval()
        counts, labels, bank = [], [], []
        for batch in data.batches(PASS_BATCH_SIZE):
            present = present_prototypes(self.last_level(batch))
            counts.append(torch.bincount(present.image, minlength=len(batch)))
            labels.append(present.labels)
            bank.append(present.prototypes)
        self.train(was_training)
        count = torch.cat(counts).float()
        own = torch.arange(self.num_classes * self.prototypes_per_class, device=count.device)
        rows = losses.class_prototype_row(own // self.prototypes_per_class, own % self.prototypes_per_class,
                                          self.num_classes, self.background_class)
        _, nearest = nearest_exemplars(torch.cat(bank), self.head.cluster_class[rows], 1)
        background = (torch.cat(labels) == self.num_classes).float().mean() if self.background_class else 0.0
        return {"present_prototypes": {"mean": float(count.mean()), "min": float(count.min())},
                "background_share": float(background),
                "exemplar_similarity": {"mean": float(nearest.mean()), "min": float(nearest.min())}}
