"""KMEx (Gautam, Boubekki, Höhne, Kampffmeyer, TMLR 2024, "Prototypical self-explainable models
without re-training"; official code ``SrishtiGautam/KMEx`` @ 3e9dfad) on frozen tokens.

KMEx turns a trained encoder into a prototype classifier without training it further: the
training split's embeddings of each class are clustered by k-means into J centres (the
prototypes, class-major: ``utils/common.py`` ``get_kmeans_class``), and an image takes the class
of its nearest centre (``test()``: ``kmc.predict``, squared Euclidean). The embedding here is
the mean of the frozen trunk's final-norm patch tokens (the official ResNet's global average
pool); the official encoder's fine-tuning has no analogue on a frozen trunk (docs/protocol/kmex.md).

Scores are the official soft similarity ``s_j = log(d_j + 1) − log(d_j + 1e-4)`` with the
(unsquared) distance ``d_j = ‖e − p_j‖`` (``BBOX_fwd``), a class's logit the max over its J
prototypes (its argmax is the nearest centre's class); activation maps are the same similarity
per token, ``log(‖t_n − p_j‖ + 1) − log(‖t_n − p_j‖ + 1e-4)``.

k-means runs per class in class order, on float64 embeddings (a deviation: the official flow
clusters the float32 embeddings its encoder returns, and its ``test()`` fails on a float64 array;
the centres differ from that float32 run by at most 6e-8, tests/methods/test_kmex.py), with
sklearn's settings of the official code's era passed explicitly (k-means++, 10 initialisations,
300 iterations, tol 1e-4, Lloyd) and one ``RandomState(seed)`` shared by the classes in order
(the official code leaves it unseeded).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from sklearn.cluster import KMeans
from torch import Tensor

from methods.base import MethodContext, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import PASS_BATCH_SIZE, check_count, check_non_negative, own_class_mask
from methods.registry import register_method

#: ε of the soft similarity (utils/common.py ``BBOX_fwd``: ``log(dist + 1e-4)``)
EPSILON = 1e-4


def soft_similarity(distances: Tensor) -> Tensor:
    """``log(d + 1) − log(d + 1e-4)`` of Euclidean (not squared) distances (``BBOX_fwd``)."""
    return torch.log(distances + 1) - torch.log(distances + EPSILON)


def euclidean(x: Tensor, y: Tensor) -> Tensor:
    """``‖x_i − y_j‖`` (torch.cdist p = 2) in float64, as the centres are kept, without the
    matrix-product shortcut, which loses digits when x_i ≈ y_j (cdist's default for more than 25
    rows): near a centre, ``log(d + 1e-4)`` magnifies float32's error of d ≈ 1e-4 by 1e4."""
    return torch.cdist(x.double(), y.double(), compute_mode="donot_use_mm_for_euclid_dist")


def kmeans_per_class(features: np.ndarray, labels: np.ndarray, num_classes: int, clusters: int, *, seed: int,
                     n_init: int, max_iter: int, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """``get_kmeans_class``: for each class in order, ``KMeans(n_clusters=J)`` on its embeddings,
    centres to prototypes ``k·J … k·J + J − 1``; returns the (C·J)×D centres and the members of
    each cluster (the official ``kmc_prt_train_ipt`` histogram). sklearn's defaults before 1.4
    are passed explicitly; ``RandomState(seed)`` is shared by the classes, drawn in class order."""
    random_state = np.random.RandomState(seed)
    centres, sizes = [], []
    for k in range(num_classes):
        members = features[labels == k]
        if len(members) < clusters:
            raise ValueError(f"kmex: class {k} has {len(members)} training images, fewer than the "
                             f"{clusters} prototypes per class to cluster them into; lower prototypes_per_class "
                             f"to at most {len(members)}")
        fitted = KMeans(n_clusters=clusters, init="k-means++", n_init=n_init, max_iter=max_iter, tol=tol,
                        algorithm="lloyd", random_state=random_state).fit(members)
        centres.append(fitted.cluster_centers_)
        sizes.append(np.bincount(fitted.labels_, minlength=clusters))
    return np.concatenate(centres), np.concatenate(sizes)


@register_method("kmex")
class KMEx(PrototypeMethod):
    """KMEx on the frozen trunk's tokens: one ``cluster`` stage that trains nothing; its
    ``on_stage_start`` clusters the un-augmented training split.

    ``inertia`` (mean squared distance of an image's embedding to its class's nearest centre) is
    what the per-class k-means minimises: ``loss_terms`` reports it, nothing descends on it."""

    reads = frozenset({"tokens"})

    def __init__(self, ctx: MethodContext, *, n_init: int = 10, max_iter: int = 300, tol: float = 1e-4) -> None:
        super().__init__(ctx)
        check_count("kmex", minimum=1, n_init=n_init, max_iter=max_iter)
        check_non_negative("kmex", tol=tol)
        self.n_init, self.max_iter, self.tol = n_init, max_iter, float(tol)
        self.loss_weights = {"inertia": 1.0}
        # placeholders until clustering replaces them (drawn from torch's seeded RNG like other heads' init)
        # float64: sklearn's fit of the float64 embeddings (the official float32 fit differs by ≤ 6e-8)
        self.register_buffer("prototypes", torch.randn(ctx.num_prototypes, ctx.embed_dim, dtype=torch.float64))
        self.register_buffer("cluster_sizes", torch.full((ctx.num_prototypes,), -1, dtype=torch.long))

    # ---- forward pieces ---------------------------------------------------------------------
    @staticmethod
    def embeddings(batch: TokenBatch) -> Tensor:
        """B×D mean of the final-norm patch tokens (the analogue of the ResNet's global pool)."""
        return batch.tokens.float().mean(dim=1)

    def similarities(self, batch: TokenBatch) -> Tensor:
        """B×P soft similarities s to every centre (float32)."""
        return soft_similarity(euclidean(self.embeddings(batch), self.prototypes)).float()

    def logits(self, batch: TokenBatch) -> Tensor:
        """``max_{j ∈ c} s_j``: argmax = the class of the nearest centre (``kmc.predict``)."""
        return self.similarities(batch).view(len(batch), self.num_classes, -1).amax(dim=-1)

    def _class_similarities(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        J = self.prototypes_per_class
        rows = torch.arange(len(batch), device=classes.device)
        return self.similarities(batch).view(len(batch), self.num_classes, J)[rows, classes]

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """s of the class's nearest centre (its logit) in that prototype's slot, 0 elsewhere."""
        s = self._class_similarities(batch, classes)
        top = torch.zeros_like(s, dtype=torch.bool).scatter_(1, s.argmax(dim=1, keepdim=True), True)
        return torch.where(top, s, torch.zeros_like(s))

    def logits_without(self, batch: TokenBatch, classes: Tensor, off: Tensor) -> Tensor:
        """The class's logit is the max over its remaining centres (0, the infimum of s, when all
        are off); the other classes' logits are unchanged."""
        remaining = self._class_similarities(batch, classes).masked_fill(off, 0.0).amax(dim=1)
        return self.logits(batch).scatter(1, classes[:, None], remaining[:, None])

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """The soft similarity of every token to each of the class's J centres, B×J×H×W."""
        H, W = batch.grid
        chosen = self.prototypes.view(self.num_classes, self.prototypes_per_class, -1)[classes]
        maps = soft_similarity(euclidean(batch.tokens.float(), chosen)).float().transpose(1, 2)
        return maps.reshape(len(batch), -1, H, W)

    # ---- "training": clustering -------------------------------------------------------------
    def stages(self) -> list[Stage]:
        return [Stage("cluster", 1)]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        if not self.uses("inertia"):
            return {}
        own = own_class_mask(batch.labels, self.ctx.num_prototypes, self.prototypes_per_class)
        squared = euclidean(self.embeddings(batch), self.prototypes).pow(2)
        return {"inertia": squared.masked_fill(~own, float("inf")).amin(dim=1).mean().float()}

    def on_stage_start(self, stage: Stage, epoch: int, data: TrainData) -> None:
        """Cluster the un-augmented training split (``data``, the official push set)."""
        features, labels = [], []
        for batch in data.batches(PASS_BATCH_SIZE):
            features.append(self.embeddings(batch).double().cpu().numpy())
            labels.append(batch.labels.cpu().numpy())
        centres, sizes = kmeans_per_class(np.concatenate(features), np.concatenate(labels), self.num_classes,
                                          self.prototypes_per_class, seed=self.ctx.seed, n_init=self.n_init,
                                          max_iter=self.max_iter, tol=self.tol)
        self.prototypes.copy_(torch.from_numpy(centres))
        self.cluster_sizes.copy_(torch.from_numpy(sizes))

    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """Images per cluster on the training split (smallest, largest) and empty clusters."""
        sizes = self.cluster_sizes
        return {"cluster_size": {"min": int(sizes.min()), "max": int(sizes.max())},
                "empty_clusters": int((sizes == 0).sum())}
