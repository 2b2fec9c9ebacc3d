"""MGProto's per-class Gaussian mixtures and their EM update (Wang et al., "MGProto: Mixture of
Gaussian prototypes", official code ``cwangrun/MGProto``, model.py), as pure functions.

Every component has the fixed isotropic σ = 1/√(2π) per dimension, so the Gaussian constants
cancel (model.py ``compute_log_prob``: ``−½d log 2π − Σ log σ − ½‖(z−μ)/σ‖²``) and
``log N(z | μ) = −π ‖z − μ‖²`` exactly. Shapes: features ``…×M×d``, means ``…×J×d``,
priors ``…×J`` (leading dimensions: independent classes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from methods.common.precision import float32_island

#: model.py ``_e_step`` / ``_m_step_diversified``: ``log(π + 1e-10)``
PRIOR_EPS = 1e-10
#: torch.optim.Adam defaults, which the official ``prototype_optimizer`` uses
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@float32_island  # the expanded form cancels to ≈ 0 at a close point: never in bf16 (README, GPU)
def squared_distances(x: Tensor, means: Tensor) -> Tensor:
    """``‖x_m − μ_j‖²`` for ``x`` …×M×d and ``means`` …×J×d → …×M×J (expanded form, clamped ≥ 0)."""
    sq = (x * x).sum(-1, keepdim=True) + (means * means).sum(-1).unsqueeze(-2) - 2.0 * x @ means.transpose(-1, -2)
    return sq.clamp_min(0.0)


def log_density(x: Tensor, means: Tensor) -> Tensor:
    """``log N(x | μ, σ²I) = −π‖x − μ‖²`` with σ = 1/√(2π) (model.py ``compute_log_prob``), …×M×J."""
    return -math.pi * squared_distances(x, means)


def mixture_log_likelihood(x: Tensor, means: Tensor, priors: Tensor) -> Tensor:
    """Mean over the M points of ``log Σ_j π_j N(x | μ_j)`` (model.py ``_score``), one value per class."""
    weighted = log_density(x, means) + torch.log(priors + PRIOR_EPS).unsqueeze(-2)
    return torch.logsumexp(weighted, dim=-1).mean(-1)


def class_log_likelihoods(top_log_density: Tensor, priors: Tensor) -> Tensor:
    """Logits ``log p(x | c) = log Σ_j π_cj p_cj`` from the per-prototype top-1 log densities
    ``…×C×J`` (model.py ``forward``: ``log(last_layer(prototype_activations))`` with the priors as
    the last layer's own-class weights), computed as a log-sum-exp. A pruned prototype (π = 0)
    drops out."""
    return torch.logsumexp(torch.log(priors) + top_log_density, dim=-1)


def mined_logits(top_log_density: Tensor, ranked_gt: Tensor, labels: Tensor, priors: Tensor) -> Tensor:
    """B×L×C logits of the L mining levels (model.py ``forward`` with ``gt``): at level ``l`` the
    ground-truth class's prototypes score with ``ranked_gt[:, :, l]`` (B×J×L, e.g. their (l+1)-th
    ranked activation over the grid) while every other class keeps its top-1 scores."""
    base = class_log_likelihoods(top_log_density, priors)  # B×C
    gt = torch.logsumexp(torch.log(priors[labels]).unsqueeze(-1) + ranked_gt, dim=1)  # B×L
    levels = ranked_gt.shape[-1]
    index = labels.view(-1, 1, 1).expand(-1, levels, 1)
    return base.unsqueeze(1).expand(-1, levels, -1).scatter(2, index, gt.unsqueeze(-1))


def diversity(means: Tensor) -> Tensor:
    """``mean_{i≠j} exp(−‖μ_i − μ_j‖²)`` within each class (model.py ``_m_step_diversified``,
    ``list_of_distances`` = squared Euclidean); 0 for a single component."""
    count = means.shape[-2]
    if count < 2:
        return means.new_zeros(means.shape[:-2])
    kernel = torch.exp(-squared_distances(means, means))
    off_diagonal = kernel.sum((-1, -2)) - kernel.diagonal(dim1=-2, dim2=-1).sum(-1)
    return off_diagonal / (count * (count - 1))


@dataclass
class EMState:
    """Means and priors of all C classes and the state of the one Adam optimiser over all C×J
    means (model.py ``prototype_optimizer = Adam([prototype_means])``): its moments and its step
    count, shared by every class."""

    means: Tensor  # C×J×d
    priors: Tensor  # C×J
    exp_avg: Tensor  # C×J×d
    exp_avg_sq: Tensor  # C×J×d
    steps: Tensor  # scalar long: Adam steps taken so far

    def clone(self) -> EMState:
        return EMState(self.means.clone(), self.priors.clone(), self.exp_avg.clone(), self.exp_avg_sq.clone(),
                       self.steps.clone())


def adam_step(state: EMState, cls: int, grad: Tensor, lr: float) -> None:
    """One step of the Adam over all means, in place, whose gradient is ``grad`` (J×d) on class
    ``cls`` and zero elsewhere (Kingma & Ba 2015, Alg. 1, written as ``torch.optim.Adam`` with its
    default betas and eps). Every class moves: a zero gradient still decays the moments, and the
    step ``lr·m̂/(√v̂ + eps)`` of a class with non-zero moments is not zero (official behaviour:
    the loss indexes one class of the full parameter, so the others get zero gradients)."""
    beta1, beta2 = ADAM_BETAS
    state.steps += 1
    state.exp_avg.mul_(beta1)[cls].add_(grad, alpha=1.0 - beta1)
    state.exp_avg_sq.mul_(beta2)[cls].addcmul_(grad, grad, value=1.0 - beta2)
    steps = state.steps.to(grad.dtype)
    bias1, bias2 = 1.0 - beta1 ** steps, 1.0 - beta2 ** steps
    denom = state.exp_avg_sq.sqrt() / bias2.sqrt() + ADAM_EPS
    state.means.sub_(lr * state.exp_avg / (bias1 * denom))


@float32_island
def em_update(bank: Tensor, state: EMState, classes: Tensor, *, loops: int, alpha: float, lr: float,
              diversity_weight: float, prior_momentum: float) -> EMState:
    """MGProto's EM (model.py ``update_GMM``) for ``classes`` (ascending, the classes of the
    batch), each on its memory bank ``bank[c]`` (``bank``: C×M×d): class after class, ``loops``
    iterations each of

    * E-step: ``r_mj ∝ π_j N(x_m | μ_j)`` with the current means (detached), then additive
      smoothing ``r ← (r + α) / Σ_j (r + α)`` (``_m_step``'s "prevent assigning to a single
      Gaussian");
    * ``π_new = mean_m r_m``;
    * one step of the Adam over all means (:func:`adam_step`) for ``−mean_m Σ_j r_mj (log N(x_m | μ_j)
      + log π_j) + λ · mean_{i≠j} exp(−‖μ_i − μ_j‖²)`` of class c (``_m_step_diversified``);
    * ``π_c ← γ π_c + (1 − γ) π_new`` (``momentum_update`` with ``tau = 0.99``).

    Returns a new state (the input tensors are not modified); runs with gradients enabled
    whatever the caller's grad mode (the training loop calls hooks under ``no_grad``).
    """
    state = state.clone()
    bank = bank.detach()
    components = state.means.shape[-2]
    for cls in classes.tolist():
        features = bank[cls]
        for _ in range(loops):
            log_prior = torch.log(state.priors[cls] + PRIOR_EPS)  # J
            with torch.no_grad():
                resp = torch.softmax(log_density(features, state.means[cls]) + log_prior, dim=-1)
                resp = (resp + alpha) / (1.0 + components * alpha)
            new_priors = resp.mean(0)
            with torch.enable_grad():
                means = state.means[cls].detach().requires_grad_(True)
                nll = -(resp * (log_density(features, means) + log_prior)).sum(-1).mean()
                (grad,) = torch.autograd.grad(nll + diversity_weight * diversity(means), means)
            adam_step(state, cls, grad, lr)
            state.priors[cls] = prior_momentum * state.priors[cls] + (1.0 - prior_momentum) * new_priors
    return state
