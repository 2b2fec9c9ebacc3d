"""ComFe's class-prototype bookkeeping, per-level scores and six loss terms (Mannix, Hodgkinson,
Bondell, "ComFe: An Interpretable Head for Vision Transformers", arXiv 2403.04125; official code
``emannix/comfe-component-features`` @ 2feeb21, ``goo/networks/clustering/comfe_head.py``, cited
``head:LINE``). Pure functions of their arguments.

Shapes: B' rows (2B in training: two views in contiguous halves), N patches, Q image prototypes,
K class prototypes, T = C (+1 with the background class) classes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

#: the clamp of 1 − s before the log-odds (head:368-373) and of class-contrast probabilities (head:406-413)
CLAMP = 1e-6
LOSS_TERMS = ("pyz", "pyp", "pz", "image_contrast", "patch_consistency", "class_contrast")


def membership(num_classes: int, per_class: int, background_prototypes: int, background_class: bool,
               label_smoothing: float) -> Tensor:
    """K×T label-smoothed class membership of the class prototypes (head:86-110): rows
    ``arange(T).repeat(k)`` (interleaved: row r ↦ class r mod T), then G pure-background rows;
    M = onehot·(1 − ε) + ε/T."""
    total = num_classes + 1 if background_class else num_classes
    classes = torch.arange(total).repeat(per_class)
    if background_class:
        classes = torch.cat([classes, torch.full((background_prototypes,), num_classes)])
    onehot = F.one_hot(classes, total).float()
    return onehot * (1.0 - label_smoothing) + label_smoothing / total


def class_prototype_row(classes: Tensor, j: int | Tensor, num_classes: int, background_class: bool) -> Tensor:
    """Official row of prototype ``j`` of class ``classes`` (class-major j ↦ interleaved row j·T + c)."""
    total = num_classes + 1 if background_class else num_classes
    return j * total + classes


@dataclass
class Level:
    """One decoder level's outputs (head:344-367)."""

    prototypes: Tensor  # z: B'×Q×D unit image prototypes
    patch_logits: Tensor  # l: B'×N×Q, ⟨z_q, x̂_n⟩/τ1
    assignment: Tensor  # A: B'×N×Q, softmax_q l
    class_assignment: Tensor  # R: B'×Q×K, softmax_k ⟨z_q, ĉ_k⟩/τ2
    prototype_classes: Tensor  # Π = R·M: B'×Q×T
    patch_classes: Tensor  # P = A·Π: B'×N×T
    scores: Tensor  # s = max_n P: B'×T


def level_outputs(prototypes: Tensor, patch_logits: Tensor, class_prototypes: Tensor, member: Tensor,
                  temp_class: float) -> Level:
    """Soft assignments and scores of one level (head:352-367)."""
    assignment = torch.softmax(patch_logits, dim=-1)
    unit_classes = F.normalize(class_prototypes, dim=-1)
    class_assignment = torch.softmax(torch.einsum("bqd,kd->bqk", prototypes, unit_classes) / temp_class, dim=-1)
    prototype_classes = class_assignment @ member
    patch_classes = torch.bmm(assignment, prototype_classes)
    return Level(prototypes, patch_logits, assignment, class_assignment, prototype_classes, patch_classes,
                 patch_classes.amax(dim=1))


def targets(labels: Tensor, num_classes: int, background_class: bool) -> Tensor:
    """B'×T hard multi-label targets: the label, and the background column always 1 (head:300-305)."""
    total = num_classes + 1 if background_class else num_classes
    y = F.one_hot(labels, total).float()
    if background_class:
        y[:, num_classes] = 1.0
    return y


def score_bce(scores: Tensor, y: Tensor) -> Tensor:
    """mean_b Σ_t BCE-with-logits(log(s / clamp(1 − s, 1e-6, 1)), y) (head:368-382)."""
    log_odds = torch.log(scores / torch.clamp(1.0 - scores, CLAMP, 1.0))
    return F.binary_cross_entropy_with_logits(log_odds, y, reduction="none").sum(dim=1).mean()


def pyz(level: Level, y: Tensor) -> Tensor:
    """Multi-label BCE on the max-over-patches scores s (head:368-373)."""
    return score_bce(level.scores, y)


def pyp(level: Level, y: Tensor) -> Tensor:
    """The same BCE on the max over image prototypes of Π (head:375-382)."""
    return score_bce(level.prototype_classes.amax(dim=1), y)


def image_contrast(level: Level, temp_contrastive: float) -> Tensor:
    """Within-image prototype contrast: row-wise cross-entropy of z zᵀ/τc with the own index as
    target, mean over the B'·Q rows (head:386-396)."""
    z = level.prototypes
    similarity = torch.bmm(z, z.transpose(1, 2)) / temp_contrastive  # B'×Q×Q
    q = z.shape[1]
    own = torch.arange(q, device=z.device).repeat(z.shape[0])
    return F.nll_loss(torch.log_softmax(similarity, dim=-1).flatten(0, 1), own)


def patch_consistency(level: Level) -> Tensor:
    """Two-view consistency (head:398-404): the first and second halves of the flattened B'·N
    assignment rows are the same patches of the two views; −mean log Σ_q A¹_q A²_q (no eps, both
    halves get gradient)."""
    flat = level.assignment.flatten(0, 1)
    half = flat.shape[0] // 2
    return -torch.log((flat[:half] * flat[half:]).sum(dim=-1)).mean()


def class_contrast(class_prototypes: Tensor, temp_contrastive: float) -> Tensor:
    """Class-prototype contrast (head:406-413): softmax over rows of ĉĉᵀ/τc, clamped ≥ 1e-6,
    mean −log of the diagonal."""
    unit = F.normalize(class_prototypes, dim=-1)
    probabilities = torch.softmax(unit @ unit.T / temp_contrastive, dim=-1).clamp(min=CLAMP)
    return -torch.log(torch.diagonal(probabilities)).mean()


def pz(level: Level) -> Tensor:
    """Clustering term −mean_{b,n} logsumexp_q l_{bnq} (head:415-416)."""
    return -torch.logsumexp(level.patch_logits, dim=-1).mean()
