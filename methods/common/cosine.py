"""ProtoPNeXt's cosine prototype activation and its similarity-based cluster and separation costs
(Willard, Moffett et al., arXiv 2406.14675; official code ``lmoffett/protopnext`` @ 77cd717:
``protopnet/activations.py`` ``CosPrototypeActivation``, ``protopnet/losses.py`` ``ClusterCost``
and ``SeparationCost``), for 1×1 prototypes on B×N×K latent tokens.
"""
from __future__ import annotations

import torch
from torch import Tensor

from methods.common.lineage import own_class_mask
from methods.common.precision import float32_island

#: ``episilon_val`` of CosPrototypeActivation
EPSILON = 1e-4
#: the activation divides by ``normalization_constant · 1.01`` after scaling x by the constant,
#: so only the 1.01 remains (activations.py ≈ :81)
DIVISOR = 1.01


@float32_island  # norms of bf16 latents lose digits; the fp32 island is cheap
def cosine_activation(latent: Tensor, prototypes: Tensor) -> Tensor:
    """``relu(⟨x_n, p⟩ / (√(‖x_n‖² + ε) · (√(‖p‖² + ε) + ε) · 1.01))``: ε inside the latent's norm,
    inside and again after the prototype's norm (activations.py ≈ :38-84, ``relu_on_cos``).

    latent B×N×K; prototypes P×K (→ B×P×N) or B×J×K, one set per image (→ B×J×N)."""
    latent_norm = torch.sqrt(latent.pow(2).sum(-1) + EPSILON)  # B×N
    prototype_norm = torch.sqrt(prototypes.pow(2).sum(-1) + EPSILON) + EPSILON  # P or B×J
    cross = prototypes @ latent.transpose(1, 2)  # B×P×N
    return torch.relu(cross / (prototype_norm[..., None] * latent_norm[:, None, :] * DIVISOR))


def cluster_similarity(pooled: Tensor, labels: Tensor, prototypes_per_class: int) -> Tensor:
    """``mean_b max_{p ∈ class(y_b)} S_bp`` on B×P max-pooled similarities (losses.py
    ``ClusterCost``: the max of S times the own-class mask, equal to the masked max as S ≥ 0)."""
    own = own_class_mask(labels, pooled.shape[1], prototypes_per_class)
    return (pooled * own).amax(dim=1).mean()


def separation_similarity(pooled: Tensor, labels: Tensor, prototypes_per_class: int) -> Tensor:
    """``mean_b max_{p ∉ class(y_b)} S_bp`` (losses.py ``SeparationCost``)."""
    own = own_class_mask(labels, pooled.shape[1], prototypes_per_class)
    return (pooled * ~own).amax(dim=1).mean()
