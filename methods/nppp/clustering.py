"""NPPP's online clustering, losses and score aggregation (official ``zijizhu/proto-non-param``,
modeling/pnp.py and modeling/utils.py), as pure functions.

Patches carry a *group*: the image's class for foreground patches, the background class C for
the others. Prototypes are ``(C+1)×J×D`` (group-major); a patch's OT label ``j`` names prototype
``group·J + j``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.common.ot import grouped_hard_assignment


def balanced_assignments(scores: Tensor, groups: Tensor, *, epsilon: float, iterations: int,
                         num_groups: int | None = None) -> Tensor:
    """Hard OT label in ``[0, J)`` of every patch (pnp.py ``online_clustering``, utils.py
    ``sinkhorn_knopp``): per group, Sinkhorn on the P_g×J scores of its patches against its own
    J prototypes with uniform marginals (rows 1/P_g, columns 1/J: equipartition), ``epsilon``
    and ``iterations`` as given, then ``argmax_j``. ``scores`` is P×J (each patch against its
    group's prototypes), ``groups`` P in ``[0, num_groups)``. All groups are solved at once;
    ``num_groups`` None reads ``max(groups) + 1`` from the device (the model passes C + 1)."""
    count = int(groups.max()) + 1 if num_groups is None else num_groups
    per_group = scores.new_full((count, scores.shape[1]), 1.0 / scores.shape[1])
    return grouped_hard_assignment(scores, groups, per_group, epsilon=epsilon, iterations=iterations).labels


def momentum_sum_update(prototypes: Tensor, tokens: Tensor, groups: Tensor, assignments: Tensor,
                        momentum: float) -> Tensor:
    """``p_gj ← γ p_gj + (1 − γ) Σ_{i: group i = g, label i = j} t_i`` for every group present
    in the batch (pnp.py ``online_clustering``: ``P_c_new = one_hot(labels)ᵀ I_c`` is a *sum*,
    then ``momentum_update``; prototypes are not renormalised, ``norm_prototypes=False``). A
    prototype of a present group that got no patch decays by γ, as in the official code; groups
    absent from the batch keep their prototypes. ``prototypes`` (C+1)×J×D, ``tokens`` P×D."""
    num_groups, per_group, dim = prototypes.shape
    sums = torch.zeros(num_groups * per_group, dim, dtype=prototypes.dtype, device=prototypes.device)
    sums.index_add_(0, groups * per_group + assignments, tokens.to(prototypes.dtype))
    # index_fill_, not `present[groups] = True`, whose CPU-made value is copied to CUDA (a sync per step)
    present = torch.zeros(num_groups, dtype=torch.bool, device=prototypes.device).index_fill_(0, groups, True)
    updated = momentum * prototypes + (1.0 - momentum) * sums.view(num_groups, per_group, dim)
    return torch.where(present[:, None, None], updated, prototypes)


def ppd_loss(cosine: Tensor, targets: Tensor, *, temperature: float, background_weight: float,
             prototypes_per_class: int) -> Tensor:
    """Patch–prototype CE (pnp.py ``PNPCriterion.ppd_criterion``): logits ``cosine / T`` over all
    (C+1)·J prototypes (``cosine`` P×(C+1)J), target the OT label, class weights 1 for the class
    prototypes and ``background_weight`` for the last J (background); ``F.cross_entropy``'s weighted
    mean, ``Σ_i w_{t_i} ℓ_i / Σ_i w_{t_i}``."""
    weight = torch.ones(cosine.shape[-1], dtype=cosine.dtype, device=cosine.device)
    weight[-prototypes_per_class:] = background_weight
    return F.cross_entropy(cosine / temperature, targets, weight=weight)


def score_aggregation(scores: Tensor, weights: Tensor, temperature: float) -> Tensor:
    """``logit_c = Σ_j softmax(w_c)_j · J · s_cj / T`` (pnp.py ``ScoreAggregation`` then
    ``class_logits / temperature``); ``scores`` B×C×J, ``weights`` C×J."""
    per_class = weights.shape[-1]
    return (scores * torch.softmax(weights, dim=-1) * per_class).sum(-1) / temperature
