"""ComFe's explanation path (official ``goo/methods/interpretable/comfe.py``, cited ``meth:LINE``,
"predict" stage): the hard patch → image-prototype assignment map, the image prototypes present
in an image with their class labels, and the exemplar search that finds, for each class
prototype, the training images' present image prototypes nearest to it (the official faiss
``IndexFlatIP`` exact inner-product search, here a matmul and top-k: same neighbours, ties may
order differently). Visualisation only: nothing here changes a parameter."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.comfe.losses import Level


def assignment_map(level: Level) -> Tensor:
    """B×N index of each patch's image prototype, argmax_q A_bnq (meth:191, 349-364)."""
    return level.assignment.argmax(dim=-1)


@dataclass
class PresentPrototypes:
    """The image prototypes present in a batch (meth:194-209), flattened over images."""

    image: Tensor  # P: which image of the batch
    slot: Tensor  # P: which of its Q image prototypes
    prototypes: Tensor  # P×D: the unit image prototypes z
    labels: Tensor  # P: argmax_t Π_bqt (C = background)
    class_prototype: Tensor  # P: argmax_k R_bqk, the class prototype each one is assigned to


def present_prototypes(level: Level) -> PresentPrototypes:
    """Prototypes q of image b with at least one patch assigned to them: unique(argmax_q A_b·) (meth:196)."""
    assigned = assignment_map(level)  # B×N
    q = level.assignment.shape[-1]
    present = F.one_hot(assigned, q).amax(dim=1).bool()  # B×Q
    image, slot = present.nonzero(as_tuple=True)
    return PresentPrototypes(image, slot, level.prototypes[image, slot],
                             level.prototype_classes[image, slot].argmax(dim=-1),
                             level.class_assignment[image, slot].argmax(dim=-1))


def nearest_exemplars(bank: Tensor, class_prototypes: Tensor, top: int) -> tuple[Tensor, Tensor]:
    """K×top bank rows with the largest inner product ⟨ĉ_k, z⟩ and those products (meth:216-226)."""
    scores = F.normalize(class_prototypes, dim=-1) @ bank.T
    values, rows = scores.topk(min(top, bank.shape[0]), dim=1)
    return rows, values
