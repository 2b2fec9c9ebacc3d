"""Prototype-deletion faithfulness (``del``): does switching off the prototypes an explanation
names hurt the prediction more than switching off as many random ones?

Co-12 "correctness" (Nauta et al., "From anecdotal evidence to quantitative evaluation methods",
ACM Computing Surveys 2023, Sec. 6.1: "incremental deletion" / "single deletion"), applied to
prototypes rather than pixels, as in the prototype-removal checks of ProtoPShare and PIP-Net.
For each test image, the ``k`` prototypes of its ground-truth class with the largest
contributions are switched off (``PrototypeMethod.logits_without``), and, apart, ``k`` prototypes
of that class drawn uniformly without replacement from a fixed seed. ``del`` is the accuracy after
the random deletion minus the accuracy after the top-k deletion, in percent points (> 0: the
explanation names prototypes the decision rests on); the mean drops of the true-class logit are
recorded next to it. With J = 1 both deletions switch off the same prototype: ``del`` is undefined.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_positive_int
from .accuracy import accuracy

DELETION_K = 1  # the single most contributing prototype ("this looks like that")
DELETION_SEED = 0  # the random prototypes: the same draws for every method and seed


def deletion_masks(contributions: Tensor, k: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(N, J) bool masks of the top-``k`` prototypes (largest contribution, ties: lower index)
    and of ``k`` prototypes drawn uniformly without replacement (random keys from ``generator``)."""
    check_positive_int("k", k)
    n, j = contributions.shape
    if k > j:
        raise ValueError(f"k: {k} exceeds the J = {j} prototypes per class")
    top = torch.sort(contributions, dim=1, descending=True, stable=True).indices[:, :k]
    keys = torch.rand((n, j), generator=generator, dtype=torch.float64).to(contributions.device)
    drawn = keys.argsort(dim=1)[:, :k]
    top_mask = torch.zeros((n, j), dtype=torch.bool, device=contributions.device).scatter_(1, top, True)
    random_mask = torch.zeros_like(top_mask).scatter_(1, drawn, True)
    return top_mask, random_mask


def deletion(logits: Tensor, logits_top: Tensor, logits_random: Tensor, labels: Tensor) -> dict[str, float | None]:
    """``del`` (percent points) and the mean true-class logit drops of both deletions.

    logits: (N, C) of the intact model; logits_top / logits_random: the same images with the
    top-k / random prototypes of their ground-truth class switched off."""
    for name, value in (("logits_top", logits_top), ("logits_random", logits_random)):
        if value.shape != logits.shape:
            raise ValueError(f"{name}: shape {tuple(value.shape)} differs from logits {tuple(logits.shape)}")
    if len(labels) == 0:
        return {"del": None, "del_logit_drop_top": None, "del_logit_drop_random": None}
    rows = torch.arange(len(labels), device=labels.device)

    def drop(after: Tensor) -> float:
        return float((logits[rows, labels] - after[rows, labels]).to(torch.float64).mean())

    return {
        "del": accuracy(logits_random, labels) - accuracy(logits_top, labels),
        "del_logit_drop_top": drop(logits_top),
        "del_logit_drop_random": drop(logits_random),
    }
