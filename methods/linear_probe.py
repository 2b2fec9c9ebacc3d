"""Linear probe (``linear_probe``): DINOv2's linear evaluation on the frozen trunk's tokens, the
black-box reference row (Oquab et al., "DINOv2: Learning Robust Visual Features without
Supervision", TMLR 2024; official code ``facebookresearch/dinov2`` @ 05c66df,
``dinov2/eval/linear.py``).

One ``nn.Linear`` on the pooled features (``pool``: CLS token, patch mean or both, methods/common/
pooled.py), initialised as ``LinearClassifier``: weight ~ N(0, 0.01²), bias 0; cross-entropy;
SGD with momentum 0.9 and weight decay 0 (``torch.optim.SGD(..., momentum=0.9, weight_decay=0)``)
and a cosine schedule to 0 over every step of training (``CosineAnnealingLR(optimizer, max_iter,
eta_min=0)``, stepped once per iteration). ``lr`` is the step size the optimiser uses, i.e. the
official ``scale_lr(lr, batch_size) = lr · batch/256`` already applied (docs/protocol/linear_probe.md).

The map (CAM, Zhou et al. CVPR 2016, on tokens) is the per-patch class logit: the classifier
applied with patch token n in place of the patch mean (``mean``, ``cls+mean``: the mean of the map
over patches is then exactly the logit) or in place of the CLS token (``cls``). The head has no
prototypes: the J maps of a class are J copies of that map and each copy carries 1/J of the
class's logit (its contribution), so every explanation metric reads it.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from methods.base import MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, WarmupCosine
from methods.common.lineage import check_count, check_positive
from methods.common.pooled import feature_width, frozen_final_norm, pooled_features
from methods.registry import register_method

#: ``LinearClassifier``: ``self.linear.weight.data.normal_(mean=0.0, std=0.01)``
INIT_STD = 0.01
#: ``CosineAnnealingLR(optimizer, max_iter, eta_min=0)`` per iteration: ½(1 + cos(π s / S)) of lr
COSINE_TO_ZERO = WarmupCosine(warmup_epochs=0.0, start_factor=1.0, final_factor=0.0, cosine_end=1.0)


@register_method("linear_probe")
class LinearProbe(PrototypeMethod):
    """A linear classifier on pooled frozen features, trained as DINOv2's linear evaluation."""

    reads = frozenset({"tokens", "block_input"})

    def __init__(self, ctx: MethodContext, *, pool: str = "cls+mean", epochs: int = 20, lr: float = 0.005) -> None:
        super().__init__(ctx)
        check_count("linear_probe", minimum=1, epochs=epochs)
        check_positive("linear_probe", lr=lr)
        self.pool, self.epochs, self.lr = pool, epochs, float(lr)
        self.final_norm = frozen_final_norm(ctx, "linear_probe", pool)
        width = feature_width(ctx.embed_dim, pool)
        self.linear = nn.Linear(width, ctx.num_classes)
        self.reset_head()
        self.loss_weights = {"ce": 1.0}

    def reset_head(self) -> None:
        """``LinearClassifier.__init__``: weight ~ N(0, 0.01²), bias 0 (torch's global RNG)."""
        with torch.no_grad():
            self.linear.weight.normal_(mean=0.0, std=INIT_STD)
            self.linear.bias.zero_()

    # ---- forward pieces ---------------------------------------------------------------------
    def features(self, batch: TokenBatch) -> Tensor:
        return pooled_features(batch, self.final_norm, self.pool)

    def logits(self, batch: TokenBatch) -> Tensor:
        return self.linear(self.features(batch))

    def patch_logits(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """B×N logit of class ``classes[b]`` with each patch token in place of the pooled patches
        (``mean``, ``cls+mean``) or of the CLS token (``cls``)."""
        D = self.ctx.embed_dim
        weight, bias = self.linear.weight[classes], self.linear.bias[classes]  # B×width, B
        tokens = batch.tokens.float()
        if self.pool == "cls":
            return torch.einsum("bnd,bd->bn", tokens, weight) + bias[:, None]
        patch_part = torch.einsum("bnd,bd->bn", tokens, weight[:, -D:])
        if self.pool == "mean":
            return patch_part + bias[:, None]
        cls_part = (self.features(batch)[:, :D] * weight[:, :D]).sum(dim=1)
        return patch_part + (cls_part + bias)[:, None]

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        H, W = batch.grid
        J = self.prototypes_per_class
        return self.patch_logits(batch, classes).view(len(batch), 1, H, W).expand(-1, J, -1, -1).contiguous()

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """1/J of the class's logit in each of its J (identical) slots: they sum to the logit."""
        rows = torch.arange(len(batch), device=classes.device)
        share = self.logits(batch)[rows, classes] / self.prototypes_per_class
        return share[:, None].expand(-1, self.prototypes_per_class).contiguous()

    # ---- training ---------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        group = ParamGroup("linear", list(self.linear.parameters()), lr=self.lr, weight_decay=0.0)
        return [Stage("linear", self.epochs, [group], optimizer="sgd", step_schedule=COSINE_TO_ZERO)]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        """``nn.CrossEntropyLoss()(logits, labels)`` (``eval_linear``)."""
        return {"ce": F.cross_entropy(self.logits(batch), batch.labels)}
