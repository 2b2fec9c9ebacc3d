"""The NPPP adapter (Zhu et al., "Interpretable Image Classification via Non-parametric Part
Prototype Learning", CVPR 2025; official code ``zijizhu/proto-non-param``) on the appended
trainable block, as docs/protocol/nppp.md specifies.

Prototypes are non-parametric buffers ``(C+1)×J×D`` (group C is the background); class scores are
the max over the grid of the cosine between the block's normalised output tokens and the
normalised prototypes, combined by score aggregation ``Σ_j softmax(w_c)_j · J · s_cj / 0.2``.
Every training batch: foreground by the first principal component of the normalised frozen
tokens (``foreground.py``), then per group present a 3-iteration equipartition Sinkhorn on the
detached cosines and hard labels. Stage 1 (``discovery``, no optimiser): momentum update of the
prototypes with the *sum* of their assigned frozen tokens. Stage 2 (``finetune``): prototypes
fixed; the block (lr 1e-4) and the aggregation weights (lr 1e-6) train on ``CE + 0.8 L_ppd``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import DiagnosticRange, MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import (
    block_groups,
    check_arg,
    check_count,
    check_non_negative,
    check_positive,
    make_block,
)
from methods.nppp.clustering import balanced_assignments, momentum_sum_update, ppd_loss, score_aggregation
from methods.nppp.foreground import SIGN_RULES, pca_foreground
from methods.registry import register_method

NAME = "nppp"
DISCOVERY = "discovery"
FINETUNE = "finetune"
#: the k-th PCA of a run draws its test matrix from a generator seeded with seed·stride + k
PCA_SEED_STRIDE = 1_000_003
#: expected mean share of foreground patches per image (diagnostics): under 5 % or over 90 % the
#: rule is not separating an object (e.g. the PCA's sign made the background the foreground)
FOREGROUND_FRACTION_RANGE: DiagnosticRange = (0.05, 0.9)


@register_method(NAME)
class NPPP(PrototypeMethod):
    """NPPP head (docs/protocol/nppp.md).

    Hyperparameters (official defaults, train.py / pnp.py): ``discovery_epochs`` /
    ``finetune_epochs`` the two stages; ``momentum`` γ of the prototype update; ``temperature`` of
    the class logits; ``sa_init`` initial aggregation weights; ``lambda_ppd``, ``ppd_temperature``
    and ``background_weight`` of L_ppd; ``ot_epsilon`` / ``ot_iterations`` of the Sinkhorn;
    ``fg_threshold`` and ``pca_niter`` of the foreground rule, whose ``sign`` is ``"native"`` (the
    randomised SVD's own sign, seeded per run) or ``"attention"`` (the ablation fix: the attended
    side is foreground); ``lr_block`` / ``lr_sa`` the stage-2 Adam groups; ``prototype_std`` the
    truncated-normal initialisation of the prototypes.
    """

    reads = frozenset({"tokens", "block_input", "attention"})

    def __init__(
        self,
        ctx: MethodContext,
        *,
        discovery_epochs: int = 1,
        finetune_epochs: int = 19,
        momentum: float = 0.99,
        temperature: float = 0.2,
        sa_init: float = 0.5,
        lambda_ppd: float = 0.8,
        ppd_temperature: float = 0.1,
        background_weight: float = 0.1,
        ot_epsilon: float = 0.05,
        ot_iterations: int = 3,
        fg_threshold: float = 0.5,
        pca_niter: int = 10,
        sign: str = "native",
        lr_block: float = 1e-4,
        lr_sa: float = 1e-6,
        prototype_std: float = 0.02,
    ) -> None:
        super().__init__(ctx)
        check_count(NAME, discovery_epochs=discovery_epochs, finetune_epochs=finetune_epochs, pca_niter=pca_niter)
        check_count(NAME, minimum=1, ot_iterations=ot_iterations)
        check_positive(NAME, temperature=temperature, ppd_temperature=ppd_temperature, ot_epsilon=ot_epsilon,
                       lr_block=lr_block, lr_sa=lr_sa, prototype_std=prototype_std)
        check_non_negative(NAME, lambda_ppd=lambda_ppd, background_weight=background_weight)
        check_arg(isinstance(momentum, (int, float)) and 0.0 <= momentum < 1.0, NAME, "momentum",
                  "a number in [0, 1)", momentum)
        check_arg(isinstance(fg_threshold, (int, float)) and 0.0 <= fg_threshold <= 1.0, NAME, "fg_threshold",
                  "a number in [0, 1]", fg_threshold)
        check_arg(isinstance(sa_init, (int, float)), NAME, "sa_init", "a number", sa_init)
        check_arg(sign in SIGN_RULES, NAME, "sign", f"one of {', '.join(SIGN_RULES)}", sign)
        if sign == "attention" and not ctx.has_cls_attention:
            raise ValueError(f"nppp: sign='attention' reads the CLS attention, and backbone "
                             f"{ctx.backbone or '(this trunk)'} has no CLS token; use sign = \"native\" "
                             "(the official rule)")
        if sign != "attention":
            self.reads = frozenset({"tokens", "block_input"})
        self.discovery_epochs, self.finetune_epochs = discovery_epochs, finetune_epochs
        self.momentum, self.temperature = momentum, temperature
        self.ppd_temperature, self.background_weight = ppd_temperature, background_weight
        self.ot_epsilon, self.ot_iterations = ot_epsilon, ot_iterations
        self.fg_threshold, self.pca_niter, self.sign = fg_threshold, pca_niter, sign
        self.lr_block, self.lr_sa = lr_block, lr_sa
        self.loss_weights = {"ce": 1.0, "ppd": lambda_ppd}

        classes, per_class = ctx.num_classes, ctx.prototypes_per_class
        with torch.random.fork_rng(devices=[]):  # initialisation is a function of ctx.seed alone
            torch.manual_seed(ctx.seed)
            self.block = make_block(ctx, True)
            prototypes = nn.init.trunc_normal_(torch.empty(classes + 1, per_class, ctx.embed_dim), std=prototype_std)
        self.register_buffer("prototypes", prototypes)  # pnp.py: a buffer, trunc_normal_(std=0.02)
        self.sa_weights = nn.Parameter(torch.full((classes, per_class), float(sa_init)))
        self.register_buffer("pca_draws", torch.zeros((), dtype=torch.long))  # PCAs run so far
        # its host copy seeds the PCA's generator without reading the device; a loaded state sets both
        self._pca_draws = 0
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "_pca_draws",
                                                                             int(module.pca_draws)))
        # per-image foreground shares of the latest epoch that ran the foreground rule (diagnostics)
        self.register_buffer("foreground_epoch", torch.tensor(-1))
        self.register_buffer("foreground_sum", torch.zeros((), dtype=torch.float64))
        self.register_buffer("foreground_min", torch.ones((), dtype=torch.float64))
        self.register_buffer("foreground_images", torch.zeros((), dtype=torch.long))

    # ---- forward pieces ------------------------------------------------------------------------
    def adapted(self, batch: TokenBatch) -> Tensor:
        """B×N×D L2-normalised output tokens of the appended block."""
        return F.normalize(self.block(batch.block_input), dim=-1)

    def cosine(self, batch: TokenBatch) -> Tensor:
        """B×N×(C+1)×J cosine of every patch to every prototype (background group last)."""
        return torch.einsum("bnd,gjd->bngj", self.adapted(batch), F.normalize(self.prototypes, dim=-1))

    def _logits_from_cosine(self, cosine: Tensor) -> Tensor:
        return score_aggregation(cosine.amax(dim=1)[:, :-1], self.sa_weights, self.temperature)

    def logits(self, batch: TokenBatch) -> Tensor:
        return self._logits_from_cosine(self.cosine(batch))

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """``softmax(w_c)_j · J · s_cj / T`` for c = ``classes[b]``: the J terms of its logit."""
        J = self.prototypes_per_class
        pooled = self.activation_maps(batch, classes).flatten(2).amax(dim=-1)  # B×J max cosine
        return torch.softmax(self.sa_weights[classes], dim=-1) * J * pooled / self.temperature

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """Cosine maps of the J prototypes of ``classes[b]`` (pnp.py ``get_attn_maps``, unpooled)."""
        protos = F.normalize(self.prototypes[classes], dim=-1)  # B×J×D
        cos = torch.einsum("bnd,bjd->bjn", self.adapted(batch), protos)
        return cos.reshape(len(batch), -1, *batch.grid)

    def foreground(self, raw: Tensor, attention: Tensor) -> Tensor:
        """B×N foreground mask; each call draws the next seeded test matrix of the run."""
        generator = torch.Generator().manual_seed(self.ctx.seed * PCA_SEED_STRIDE + self._pca_draws)
        self._pca_draws += 1
        self.pca_draws += 1
        return pca_foreground(raw, attention, threshold=self.fg_threshold, niter=self.pca_niter, sign=self.sign,
                              generator=generator)

    def ot_targets(self, batch: TokenBatch, cosine: Tensor, epoch: int) -> tuple[Tensor, Tensor, Tensor]:
        """Flattened (P = B·N) normalised frozen tokens, groups (label or C) and OT labels in [0, J);
        the images' foreground shares are recorded for global epoch ``epoch`` (diagnostics)."""
        raw = F.normalize(batch.tokens, dim=-1)
        fg = self.foreground(raw, batch.attention)
        self._record_foreground(fg, epoch)
        groups = torch.where(fg, batch.labels[:, None], self.num_classes).flatten()
        scores = cosine.detach().flatten(0, 1)  # P×(C+1)×J
        scores = scores[torch.arange(len(groups), device=groups.device), groups]  # P×J, own group
        labels = balanced_assignments(scores, groups, epsilon=self.ot_epsilon, iterations=self.ot_iterations,
                                      num_groups=self.num_classes + 1)
        return raw.flatten(0, 1), groups, labels

    @torch.no_grad()
    def _record_foreground(self, fg: Tensor, epoch: int) -> None:
        kept = self.foreground_epoch == epoch  # a new epoch starts a new tally (on the device: no host sync)
        self.foreground_epoch.fill_(epoch)
        self.foreground_sum.copy_(torch.where(kept, self.foreground_sum, 0.0))
        self.foreground_min.copy_(torch.where(kept, self.foreground_min, 1.0))
        self.foreground_images.copy_(torch.where(kept, self.foreground_images, 0))
        share = fg.to(self.foreground_sum.dtype).mean(dim=-1)  # B
        self.foreground_sum += share.sum()
        self.foreground_min.copy_(torch.minimum(self.foreground_min, share.min()))
        self.foreground_images += share.numel()

    # ---- training ----------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        groups = [*block_groups(self.block, self.lr_block, 0.0),
                  ParamGroup("score_aggregation", [self.sa_weights], self.lr_sa)]
        return [Stage(DISCOVERY, self.discovery_epochs), Stage(FINETUNE, self.finetune_epochs, groups)]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        if stage.name == DISCOVERY:
            return {}
        cosine = self.cosine(batch)
        terms = {"ce": F.cross_entropy(self._logits_from_cosine(cosine), batch.labels)}
        if self.uses("ppd"):
            _, groups, labels = self.ot_targets(batch, cosine, epoch)
            terms["ppd"] = ppd_loss(cosine.flatten(0, 1).flatten(1), groups * self.prototypes_per_class + labels,
                                    temperature=self.ppd_temperature, background_weight=self.background_weight,
                                    prototypes_per_class=self.prototypes_per_class)
        return terms

    def after_step(self, batch: TokenBatch, stage: Stage, epoch: int) -> None:
        """Stage 1: momentum update of the prototypes with the sums of their assigned frozen tokens."""
        if stage.name != DISCOVERY:
            return
        raw, groups, labels = self.ot_targets(batch, self.cosine(batch), epoch)
        self.prototypes.copy_(momentum_sum_update(self.prototypes, raw, groups, labels, self.momentum))

    # ---- diagnostics ---------------------------------------------------------------------------
    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """``foreground_fraction``: mean and min over the training images of the latest epoch that
        ran the foreground rule of the share of their patches it called foreground, with that
        epoch (the rule is batch-level and draws from the run's generator, so it is recorded
        during training rather than recomputed)."""
        images = int(self.foreground_images)
        return {"foreground_fraction": {
            "mean": float(self.foreground_sum) / images, "min": float(self.foreground_min),
            "epoch": int(self.foreground_epoch), "images": images,
        } if images else None}

    def diagnostic_ranges(self) -> dict[str, DiagnosticRange]:
        return {"foreground_fraction.mean": FOREGROUND_FRACTION_RANGE}
