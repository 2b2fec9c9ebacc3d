"""DINO-QPM (``dinoqpm``): Zimmermann, Norrenbrock and Rosenhahn, "DINO-QPM: Adapting Visual
Foundation Models for Globally Interpretable Image Classification", CVPR 2026; official code
``RobertZimm/DINO-QPM`` @ b7509a2, configuration ``configs/models/qpm/dinov2.yaml``.

Head on the frozen trunk (``architectures/qpm_dino/dino_model.py``, ``Dino2Div``, arch ``linear``,
``arch_type: normal``, ``feat_vec_type: avg_pooling``, ``use_norm: True``): the final-norm patch
tokens and the CLS token (appended last) pass an MLP of ``layers`` × (Linear → BatchNorm over
tokens → ReLU), D → hidden → … → ``feature_dim``; the feature maps are the MLP outputs of the patch
tokens on the grid, the feature vector their mean (the CLS output only enters BatchNorm's batch
statistics, as in the official forward). Dense phase: ``nn.Linear(feature_dim, C)`` on the feature
vector with dropout (``FinalLayer``); loss cross-entropy + ``fdl_dense`` · FDL (Q-SENN's feature
diversity loss, ``training/losses/FeatureDiversityLoss.py``). Then the quadratic program
(methods/dinoqpm/assignment.py) selects ``n_features`` features and assigns exactly J
(``prototypes_per_class``, the paper's 5) of them to each class; the final layer becomes the fixed
binary ``SLDDLevel``: ``logit_c = Σ_{j ∈ S_c} (f_j − μ_j) / max(σ_j, 1e-6)`` with μ, σ the dense
features' training mean and (population) standard deviation, no bias. Fine-tuning phase: the MLP
alone trains with cross-entropy + ``fdl_finetune`` · FDL + ``l1_maps`` · mean|maps| +
``l1_features`` · mean|f| (``training/train.py``, ``get_l1_loss``, ``get_l1_fv_loss``).

A class's J maps are its J assigned features' maps (ascending feature index); each contributes its
normalised feature to the logit (exact: the logit is their sum). Before the assignment exists the
J maps are the class's J largest-weight dense features.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from methods.base import DiagnosticRange, MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import PASS_BATCH_SIZE, check_count, check_non_negative, check_positive
from methods.common.pooled import cls_token, frozen_final_norm
from methods.dinoqpm.assignment import check_program, qpm_constants, solve_assignment
from methods.dinoqpm.losses import feature_diversity_loss
from methods.registry import register_method

#: ``SLDDLevel.forward``: ``(input - mean) / torch.clamp(std, min=1e-6)``
STD_FLOOR = 1e-6


class TokenBatchNorm(nn.Module):
    """``BatchNorm1dPermuted``: BatchNorm1d over the channels of B×L×C tokens."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(x.permute(0, 2, 1)).permute(0, 2, 1)


def make_mlp(embed_dim: int, hidden_dim: int, feature_dim: int, layers: int) -> nn.Sequential:
    """``Dino2Div.handle_layers``: layer 0 D→hidden (D→features if only one), middle hidden→hidden,
    last hidden→features, each followed by BatchNorm and ReLU."""
    mlp = nn.Sequential()
    for position in range(layers):
        width_in = embed_dim if position == 0 else hidden_dim
        width_out = feature_dim if position == layers - 1 else hidden_dim
        mlp.append(nn.Linear(width_in, width_out))
        mlp.append(TokenBatchNorm(width_out))
        mlp.append(nn.ReLU())
    return mlp


@register_method("dinoqpm")
class DinoQPM(PrototypeMethod):
    """An MLP on frozen patch tokens, average-pooled features, and a QP-selected binary final layer."""

    reads = frozenset({"tokens", "block_input"})

    def __init__(self, ctx: MethodContext, *, feature_dim: int = 512, hidden_dim: int = 2048, layers: int = 4,
                 n_features: int = 50, dense_epochs: int = 25, finetune_epochs: int = 25,
                 lr_dense: float = 1e-3, lr_finetune: float = 5e-3, weight_decay_dense: float = 7e-4,
                 weight_decay_finetune: float = 8e-4, dropout_dense: float = 0.2, dropout_finetune: float = 0.0,
                 fdl_dense: float = 0.5, fdl_finetune: float = 1.0, l1_maps: float = 5.0, l1_features: float = 1.0,
                 similarity_penalty: bool = True, solver: str = "highs", time_limit: float = 10800.0,
                 mip_gap: float = 5e-3) -> None:
        super().__init__(ctx)
        check_count("dinoqpm", minimum=1, feature_dim=feature_dim, hidden_dim=hidden_dim, layers=layers,
                    n_features=n_features, finetune_epochs=finetune_epochs)
        check_count("dinoqpm", dense_epochs=dense_epochs)
        check_positive("dinoqpm", lr_dense=lr_dense, lr_finetune=lr_finetune)
        check_non_negative("dinoqpm", weight_decay_dense=weight_decay_dense,
                           weight_decay_finetune=weight_decay_finetune, fdl_dense=fdl_dense,
                           fdl_finetune=fdl_finetune, l1_maps=l1_maps, l1_features=l1_features)
        for name, p in (("dropout_dense", dropout_dense), ("dropout_finetune", dropout_finetune)):
            if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1):
                raise ValueError(f"dinoqpm: {name} must be a probability in [0, 1), got {p!r}")
        check_program(num_features=feature_dim, num_classes=ctx.num_classes, n_features=n_features,
                      n_per_class=ctx.prototypes_per_class, solver=solver, time_limit=time_limit, mip_gap=mip_gap)
        self.n_features, self.dense_epochs, self.finetune_epochs = n_features, dense_epochs, finetune_epochs
        self.lr_dense, self.lr_finetune = float(lr_dense), float(lr_finetune)
        self.weight_decay_dense, self.weight_decay_finetune = float(weight_decay_dense), float(weight_decay_finetune)
        self.similarity_penalty, self.solver = similarity_penalty, solver
        self.time_limit, self.mip_gap = float(time_limit), float(mip_gap)
        self.uses_cls = ctx.has_cls_attention and ctx.num_prefix_tokens >= 1
        self.final_norm = frozen_final_norm(ctx, "dinoqpm", "cls") if self.uses_cls else None
        self.mlp = make_mlp(ctx.embed_dim, hidden_dim, feature_dim, layers)
        self.linear = nn.Linear(feature_dim, ctx.num_classes)
        self.dropout_dense, self.dropout_finetune = nn.Dropout(dropout_dense), nn.Dropout(dropout_finetune)
        # the QP's result (buffers: they survive a checkpoint); ``assigned`` 0 until the program ran
        self.register_buffer("assigned", torch.zeros((), dtype=torch.bool))
        self.register_buffer("selection", torch.zeros(n_features, dtype=torch.long))
        self.register_buffer("sparse_weight", torch.zeros(ctx.num_classes, n_features))
        self.register_buffer("feature_mean", torch.zeros(n_features))
        self.register_buffer("feature_std", torch.ones(n_features))
        # the program's objective, the solver's relative gap, the de-duplication cuts (diagnostics)
        self.register_buffer("program", torch.zeros(3, dtype=torch.float64))
        self.loss_weights = {"ce": 1.0, "fdl_dense": float(fdl_dense), "fdl_finetune": float(fdl_finetune),
                             "l1_maps": float(l1_maps), "l1_features": float(l1_features)}

    # ---- forward pieces ---------------------------------------------------------------------
    def feature_maps(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        """B×F×H×W feature maps and B×F feature vector (their mean) of all ``feature_dim`` features."""
        tokens = batch.tokens.float()
        x = torch.cat([tokens, cls_token(batch, self.final_norm)[:, None]], dim=1) if self.uses_cls else tokens
        x = self.mlp(x)
        patches = x[:, :tokens.shape[1]]
        H, W = batch.grid
        return patches.transpose(1, 2).reshape(len(batch), -1, H, W), patches.mean(dim=1)

    def sparse_logits(self, vector: Tensor) -> Tensor:
        """``SLDDLevel``: the binary assignment on the normalised selected features (no bias)."""
        normalised = (vector[:, self.selection] - self.feature_mean) / self.feature_std.clamp(min=STD_FLOOR)
        return normalised @ self.sparse_weight.T

    def logits(self, batch: TokenBatch) -> Tensor:
        _, vector = self.feature_maps(batch)
        return self.sparse_logits(vector) if bool(self.assigned) else self.linear(vector)

    def class_features(self, classes: Tensor) -> Tensor:
        """B×J feature indices (of ``feature_dim``) of each class's J maps."""
        J = self.prototypes_per_class
        if bool(self.assigned):
            slots = self.sparse_weight[classes].topk(J, dim=1).indices.sort(dim=1).values
            return self.selection[slots]
        return self.linear.weight[classes].topk(J, dim=1).indices.sort(dim=1).values

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        maps, _ = self.feature_maps(batch)
        index = self.class_features(classes)
        return torch.gather(maps, 1, index[:, :, None, None].expand(-1, -1, *maps.shape[2:]))

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """Sparse: each assigned feature's ``(f − μ)/σ`` (the logit is their sum); dense: ``w_cj f_j``."""
        _, vector = self.feature_maps(batch)
        index = self.class_features(classes)
        if bool(self.assigned):
            position = torch.searchsorted(self.selection, index)
            mean, std = self.feature_mean[position], self.feature_std[position].clamp(min=STD_FLOOR)
            return (vector.gather(1, index) - mean) / std
        return vector.gather(1, index) * self.linear.weight[classes].gather(1, index)

    def global_features(self, batch: TokenBatch) -> Tensor:
        """B×n_features: the selected features the final layer reads (``final_features`` of the
        official evaluation: un-normalised means); before the assignment, all ``feature_dim``."""
        _, vector = self.feature_maps(batch)
        return vector[:, self.selection] if bool(self.assigned) else vector

    # ---- training ---------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        mlp = list(self.mlp.parameters())
        dense = [ParamGroup("mlp", mlp, lr=self.lr_dense, weight_decay=self.weight_decay_dense),
                 ParamGroup("linear", list(self.linear.parameters()), lr=self.lr_dense,
                            weight_decay=self.weight_decay_dense)]
        finetune = [ParamGroup("mlp", mlp, lr=self.lr_finetune, weight_decay=self.weight_decay_finetune)]
        return [Stage("dense", self.dense_epochs, dense, optimizer="adamw"),
                Stage("finetune", self.finetune_epochs, finetune, optimizer="adamw")]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        """``train.py``: CE on the logits of the dropped-out feature vector, FDL on the (selected) maps
        scaled by that vector; fine-tuning adds the L1 terms on the selected maps and vector."""
        maps, vector = self.feature_maps(batch)
        if stage.name == "dense":
            features = self.dropout_dense(vector)
            logits = self.linear(features)
            return {"ce": F.cross_entropy(logits, batch.labels),
                    "fdl_dense": feature_diversity_loss(maps, logits, self.linear.weight, features)}
        maps = maps[:, self.selection]
        features = self.dropout_finetune(vector[:, self.selection])
        normalised = (features - self.feature_mean) / self.feature_std.clamp(min=STD_FLOOR)
        logits = normalised @ self.sparse_weight.T
        return {"ce": F.cross_entropy(logits, batch.labels),
                "fdl_finetune": feature_diversity_loss(maps, logits, self.sparse_weight, features),
                "l1_maps": maps.abs().mean(), "l1_features": features.abs().mean()}

    @torch.no_grad()
    def on_stage_start(self, stage: Stage, epoch: int, data: TrainData) -> None:
        """Before fine-tuning: the dense features of the training split, the QP, the sparse layer
        (``finetune_qpm`` → ``compute_qpm_feature_selection_and_assignment`` → ``set_model_sldd``)."""
        if stage.name != "finetune":
            return
        was_training = self.training
        self.eval()
        vectors, labels = [], []
        for batch in data.batches(PASS_BATCH_SIZE):
            vectors.append(self.feature_maps(batch)[1].double().cpu())
            labels.append(batch.labels.cpu())
        self.train(was_training)
        features, targets = torch.cat(vectors).numpy(), torch.cat(labels).numpy()
        a, r = qpm_constants(features, targets, self.num_classes)
        solved = solve_assignment(a, r if self.similarity_penalty else None, n_features=self.n_features,
                                  n_per_class=self.prototypes_per_class, mip_gap=self.mip_gap,
                                  time_limit=self.time_limit, solver=self.solver)
        selected = torch.as_tensor(solved.selected, dtype=torch.long)
        chosen = features[:, solved.selected]
        self.selection.copy_(selected)
        self.sparse_weight.copy_(torch.as_tensor(solved.weight))
        # ``calculate_metadata``: mean and sqrt(Σ (x − x̄)² / n) of the dense features
        self.feature_mean.copy_(torch.as_tensor(chosen.mean(axis=0), dtype=torch.float32))
        self.feature_std.copy_(torch.as_tensor(np.sqrt(((chosen - chosen.mean(axis=0)) ** 2).mean(axis=0)),
                                               dtype=torch.float32))
        self.assigned.fill_(True)
        self.program.copy_(torch.tensor([solved.objective, solved.gap, solved.cuts], dtype=torch.float64))

    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """The program's objective, the gap the solver reached and the de-duplication cuts it needed."""
        if not bool(self.assigned):
            return {}
        objective, gap, cuts = self.program.tolist()
        return {"qp": {"objective": objective, "mip_gap": gap, "dedup_cuts": int(cuts)}}

    def diagnostic_ranges(self) -> dict[str, DiagnosticRange]:
        """A gap above ``mip_gap``: HiGHS stopped at ``time_limit`` before proving the requested gap."""
        return {"qp.mip_gap": (0.0, self.mip_gap)}
