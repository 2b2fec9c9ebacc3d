"""PIP-Net's forward pieces, loss terms and classifier hooks as pure functions (official code
``M-Nauta/PIPNet`` @ 12c4da7; file:line citations below are to that snapshot).

Conventions: presences ``z`` B×P×N (softmax over the P prototypes at each of the N = H·W grid
positions), pooled scores B×P, classifier weight W C×P (not class-major: a prototype serves any
class through its weights).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

#: ``log(⟨u, v⟩ + 1e-12)`` in the alignment loss (train.py:156-162 ``align_loss``)
ALIGN_EPS = 1e-12
#: ``log(tanh(Σ_b pooled) + EPS)``: train.py:68 passes 1e-8, overriding the signature's 1e-10
TANH_EPS = 1e-8
#: pooled scores below this are zeroed at inference (pipnet.py:35-38, ``inference=True``)
INFERENCE_THRESHOLD = 0.1
#: subtracted from every classifier weight after each stage-2 step (train.py:89-94)
SHRINK = 1e-3


def presences(logits: Tensor) -> Tensor:
    """``z = softmax_p(a)`` over the prototype axis (pipnet.py:86-98, the add-on's Softmax(dim=1));
    ``logits`` B×N×P add-on outputs → B×P×N presences that sum to 1 at every position."""
    return logits.softmax(dim=-1).transpose(1, 2)


def pooled_presences(z: Tensor) -> Tensor:
    """``pooled_p = max_n z_{p,n}`` (pipnet.py:99-102, AdaptiveMaxPool2d(1) + Flatten)."""
    return z.amax(dim=-1)


def clamp_for_inference(pooled: Tensor, threshold: float = INFERENCE_THRESHOLD) -> Tensor:
    """Pooled scores strictly below ``threshold`` set to 0 (pipnet.py:36, ``where(pooled < 0.1, 0, pooled)``)."""
    return torch.where(pooled < threshold, torch.zeros_like(pooled), pooled)


def scoring_sheet(pooled: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``out = pooled · relu(W)ᵀ (+ b)`` (pipnet.py:54-71, ``NonNegLinear``)."""
    out = pooled @ weight.clamp_min(0.0).T
    return out if bias is None else out + bias


def align_loss(z1: Tensor, z2: Tensor) -> Tensor:
    """``½ [A(z1, sg z2) + A(z2, sg z1)]`` with ``A(u, v) = −mean_rows log(⟨u_row, v_row⟩ + 1e-12)``,
    rows matched by grid position (train.py:107-110 and ``align_loss`` :156-162); z B×P×N."""
    def one_way(u: Tensor, v: Tensor) -> Tensor:
        return -torch.log((u * v).sum(dim=1) + ALIGN_EPS).mean()

    return 0.5 * (one_way(z1, z2.detach()) + one_way(z2, z1.detach()))


def tanh_loss(pooled1: Tensor, pooled2: Tensor) -> Tensor:
    """``−½ Σ_v mean_p log(tanh(Σ_b pooled_{v,b,p}) + 1e-8)`` (train.py:111): a sum over the batch."""
    def one_view(pooled: Tensor) -> Tensor:
        return -torch.log(torch.tanh(pooled.sum(dim=0)) + TANH_EPS).mean()

    return 0.5 * (one_view(pooled1) + one_view(pooled2))


def class_loss(out: Tensor, labels: Tensor, multiplier: float | Tensor) -> Tensor:
    """``NLL(log_softmax(log1p(out^m)), y)``, mean over the rows of both views (train.py:118-119,
    main.py:122 ``NLLLoss(reduction='mean')``); ``out`` 2B×C, ``labels`` 2B."""
    return F.nll_loss(F.log_softmax(torch.log1p(out.pow(multiplier)), dim=1), labels)


def shrink_weights(weight: Tensor, bias: Tensor | None, multiplier: Tensor) -> None:
    """In place, after every stage-2 step (train.py:89-94): ``W ← max(W − 1e-3, 0)`` (every weight
    moves, a proximal L1 step), ``m ← max(m, 1)``, ``b ← max(b, 0)``."""
    weight.copy_((weight - SHRINK).clamp_min(0.0))
    multiplier.clamp_(min=1.0)
    if bias is not None:
        bias.clamp_(min=0.0)


def shrink_before_epoch(epoch: int, epochs: int) -> bool:
    """Whether main.py:232-236 shrinks W once more at the start of stage-2 epoch ``epoch``
    (1-based of ``epochs``): ``(epoch == epochs or epoch % 30 == 0) and epochs > 1``."""
    return (epoch == epochs or epoch % 30 == 0) and epochs > 1


def unused_prototypes(max_pooled: Tensor, weight: Tensor, threshold: float = INFERENCE_THRESHOLD) -> Tensor:
    """P bool: prototypes main.py:268-280 zeroes after training — relevant (``max_c W[c,p] > 1e-3``)
    but never present above 0.1 on the projection set (``max pooled ≤ 0.1``, vis_pipnet.py's top-10)."""
    return (weight.amax(dim=0) > SHRINK) & (max_pooled <= threshold)


def cosine_factor(lr: float, eta_min: float, t: float, period: float) -> float:
    """``CosineAnnealingLR`` at fractional step ``t`` of ``period``, as a multiplier of ``lr``:
    ``(η_min + (lr − η_min)(1 + cos(π t/T))/2) / lr`` (PyTorch's closed form)."""
    return (eta_min + (lr - eta_min) * (1 + math.cos(math.pi * t / period)) / 2) / lr


def restart_factor(lr: float, eta_min: float, t: float, period: float) -> float:
    """``CosineAnnealingWarmRestarts(T_0 = period, T_mult = 1)`` at fractional epoch ``t``, as a multiplier."""
    return cosine_factor(lr, eta_min, t % period, period)
