"""MGProto's per-class Gaussian mixtures and their EM update (Wang et al., "MGProto: Mixture of
Gaussian prototypes", official code ``cwangrun/MGProto``, model.py), as pure functions.

Every component has the fixed isotropic σ = 1/√(2π) per dimension, so the Gaussian constants
cancel (model.py ``compute_log_prob``: ``−½d log 2π − Σ log σ − ½‖(z−μ)/σ‖²``) and
``log N(z | μ) = −π ‖z − μ‖²`` exactly. The EM (``update_GMM``) reads its densities from
``_estimate_log_prob`` instead, which adds ``eps = 1e-10`` to σ (:func:`em_log_density`).
Shapes: features ``…×M×d``, means ``…×J×d``, priors ``…×J`` (leading dimensions: independent classes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from methods.common.precision import float32_island

#: model.py ``_e_step`` / ``_m_step_diversified``: ``log(π + 1e-10)``
PRIOR_EPS = 1e-10
#: model.py ``_estimate_log_prob(..., eps=1e-10)``: ``((x − μ)/(σ + eps))²`` and ``log(σ + eps)``
SIGMA_EPS = 1e-10
#: the components' fixed σ per dimension (model.py ``init_sigma = 1 / math.sqrt(2*math.pi)``)
SIGMA = 1.0 / math.sqrt(2.0 * math.pi)
#: torch.optim.Adam defaults, which the official ``prototype_optimizer`` uses
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@float32_island  # the expanded form cancels to ≈ 0 at a close point: never in bf16 (docs/guides/gpu.md)
def squared_distances(x: Tensor, means: Tensor) -> Tensor:
    """``‖x_m − μ_j‖²`` for ``x`` …×M×d and ``means`` …×J×d → …×M×J (expanded form, clamped ≥ 0)."""
    sq = (x * x).sum(-1, keepdim=True) + (means * means).sum(-1).unsqueeze(-2) - 2.0 * x @ means.transpose(-1, -2)
    return sq.clamp_min(0.0)


def log_density(x: Tensor, means: Tensor) -> Tensor:
    """``log N(x | μ, σ²I) = −π‖x − μ‖²`` with σ = 1/√(2π) (model.py ``compute_log_prob``), …×M×J."""
    return -math.pi * squared_distances(x, means)


def em_log_density(x: Tensor, means: Tensor) -> Tensor:
    """The EM's ``log N(x | μ, σ²I)``, …×M×J, as model.py ``_estimate_log_prob`` computes it with
    σ + eps in place of σ: ``−½d log 2π − d log(σ + eps) − ½‖x − μ‖²/(σ + eps)²`` (eps = 1e-10; the
    ``−π‖x − μ‖²`` of :func:`log_density` scaled by (1 + eps√(2π))⁻² ≈ 1 − 5e-10, plus a constant)."""
    dim = x.shape[-1]
    constant = -0.5 * dim * math.log(2.0 * math.pi) - dim * math.log(SIGMA + SIGMA_EPS)
    return constant - (0.5 / (SIGMA + SIGMA_EPS) ** 2) * squared_distances(x, means)


def mixture_log_likelihood(x: Tensor, means: Tensor, priors: Tensor) -> Tensor:
    """Mean over the M points of ``log Σ_j π_j N(x | μ_j)`` (model.py ``_score``, whose density is
    ``_estimate_log_prob``: :func:`em_log_density`), one value per class."""
    weighted = em_log_density(x, means) + torch.log(priors + PRIOR_EPS).unsqueeze(-2)
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


def _adam_moments_step(state: EMState, grad: Tensor, steps: Tensor, live: Tensor, lr: float) -> None:
    """One ``torch.optim.Adam`` step (Kingma & Ba 2015, Alg. 1, default betas and eps) of every
    class where ``live`` (C bool) is set, in place, with gradient ``grad`` (C×J×d; zero for a class
    not being fitted: its moments decay and its mean still moves by ``lr·m̂/(√v̂ + eps)``) and
    ``steps`` (C) the global step number each class is at (for the bias corrections)."""
    beta1, beta2 = ADAM_BETAS
    live = live.view(-1, 1, 1)
    exp_avg = state.exp_avg * beta1 + (1.0 - beta1) * grad
    exp_avg_sq = state.exp_avg_sq * beta2 + (1.0 - beta2) * grad * grad
    steps = steps.to(grad.dtype).view(-1, 1, 1)
    bias1, bias2 = 1.0 - beta1 ** steps, 1.0 - beta2 ** steps
    means = state.means - lr * exp_avg / (bias1 * (exp_avg_sq.sqrt() / bias2.sqrt() + ADAM_EPS))
    state.exp_avg.copy_(torch.where(live, exp_avg, state.exp_avg))
    state.exp_avg_sq.copy_(torch.where(live, exp_avg_sq, state.exp_avg_sq))
    state.means.copy_(torch.where(live, means, state.means))


#: zero-gradient steps summed at once in :func:`_drift` (bounds its C×J×d×chunk temporary)
DRIFT_CHUNK = 32


def _drift(state: EMState, start: Tensor, count: Tensor, horizon: int, lr: float) -> None:
    """``count[c]`` (≤ ``horizon``) zero-gradient Adam steps of each class c, its first at global
    step ``start[c] + 1``, in place: the steps of the one Adam while other classes are fitted.
    With g = 0 the moments decay geometrically, ``m_j = β₁ʲ m``, ``v_j = β₂ʲ v``, so the j-th step
    moves the mean by ``lr·(β₁ʲ m/(1 − β₁ˢ)) / (√(β₂ʲ v/(1 − β₂ˢ)) + eps)`` (s = start + j, the
    step of :func:`_adam_moments_step`); the steps are summed in closed form, a chunk at a time."""
    if horizon == 0:
        return
    beta1, beta2 = ADAM_BETAS
    dtype = state.means.dtype
    offsets = torch.arange(1, horizon + 1, device=start.device)
    steps = (start.unsqueeze(-1) + offsets).to(dtype)  # C×H global step numbers
    live = offsets <= count.unsqueeze(-1)
    offsets = offsets.to(dtype)
    scale = torch.where(live, lr * beta1 ** offsets / (1.0 - beta1 ** steps), 0.0)  # C×H
    spread = (beta2 ** offsets / (1.0 - beta2 ** steps)).sqrt()  # C×H
    root_v = state.exp_avg_sq.sqrt().unsqueeze(-1)  # C×J×d×1
    moved = torch.zeros_like(state.means)
    for first in range(0, horizon, DRIFT_CHUNK):
        chunk = slice(first, first + DRIFT_CHUNK)
        denominators = root_v * spread[:, None, None, chunk] + ADAM_EPS
        moved += (scale[:, None, None, chunk] / denominators).sum(-1)
    state.means.sub_(state.exp_avg * moved)
    count = count.to(dtype).view(-1, 1, 1)
    state.exp_avg.mul_(beta1 ** count)
    state.exp_avg_sq.mul_(beta2 ** count)


def _class_gradients(bank: Tensor, means: Tensor, log_prior: Tensor, resp: Tensor,
                     diversity_weight: float) -> Tensor:
    """∂/∂μ_c of ``−mean_m Σ_j r_mj (log N(x_m | μ_j) + log π_j) + λ · mean_{i≠j} exp(−‖μ_i − μ_j‖²)``
    (model.py ``_m_step_diversified``) for every class at once (classes are independent, so
    the gradient of their sum is each class's own)."""
    with torch.enable_grad():
        means = means.detach().requires_grad_(True)
        nll = -(resp * (em_log_density(bank, means) + log_prior.unsqueeze(-2))).sum(-1).mean(-1)
        (grad,) = torch.autograd.grad((nll + diversity_weight * diversity(means)).sum(), means)
    return grad


@float32_island
def em_update(bank: Tensor, state: EMState, pending: Tensor, *, loops: int, alpha: float, lr: float,
              diversity_weight: float, prior_momentum: float) -> EMState:
    """MGProto's EM (model.py ``update_GMM``) for the classes set in ``pending`` (C bool: the
    classes enqueued since the last EM, whose banks are full), each on its memory bank
    ``bank[c]`` (``bank``: C×M×d). The official code fits them one after the other in ascending
    order, ``loops`` iterations each of

    * E-step: ``r_mj ∝ π_j N(x_m | μ_j)`` (:func:`em_log_density`, σ + 1e-10 as the official
      ``_estimate_log_prob``) with the current means (detached), then additive
      smoothing ``r ← (r + α) / Σ_j (r + α)`` (``_m_step``'s "prevent assigning to a single
      Gaussian");
    * ``π_new = mean_m r_m``;
    * one step of the one Adam over all C×J means for ``−mean_m Σ_j r_mj (log N(x_m | μ_j) +
      log π_j) + λ · mean_{i≠j} exp(−‖μ_i − μ_j‖²)`` of class c (``_m_step_diversified``): every
      other class gets a zero gradient, so its moments decay and its mean drifts;
    * ``π_c ← γ π_c + (1 − γ) π_new`` (``momentum_update`` with ``tau = 0.99``).

    A class's loss depends on its own mean, prior and bank only, so the same updates are computed
    for all classes at once: the k-th pending class (0-based) first drifts through the
    ``loops·k`` zero-gradient steps of the classes before it, then all pending classes take
    their ``loops`` fitted steps together (each with its own global step number), then drift
    through the steps of the classes after them; a class not pending drifts through all
    ``loops·K`` steps. Equal to the sequential loop up to rounding (tests/methods/test_mgproto.py).

    Returns a new state (the input tensors are not modified); runs with gradients enabled
    whatever the caller's grad mode (the training loop calls hooks under ``no_grad``).
    """
    state = state.clone()
    bank = bank.detach()
    components = state.means.shape[-2]
    count = int(pending.sum())  # K: the loop bounds below
    position = pending.long().cumsum(0) - 1  # k of each pending class
    before = torch.where(pending, loops * position, loops * count)
    _drift(state, state.steps.expand_as(position), before, loops * count, lr)
    start = state.steps + loops * position  # global step before a pending class's first fitted step
    for loop in range(loops):
        log_prior = torch.log(state.priors + PRIOR_EPS)  # C×J
        with torch.no_grad():
            resp = torch.softmax(em_log_density(bank, state.means) + log_prior.unsqueeze(-2), dim=-1)
            resp = (resp + alpha) / (1.0 + components * alpha)
        grad = _class_gradients(bank, state.means, log_prior, resp, diversity_weight)
        _adam_moments_step(state, grad, start + loop + 1, pending, lr)
        # _m_step_diversified: π_new = (Σ_m r_mj + 1e-10) / M; then momentum_update
        new_priors = prior_momentum * state.priors + (1.0 - prior_momentum) * (resp.sum(-2) + PRIOR_EPS) / resp.shape[-2]
        state.priors.copy_(torch.where(pending.unsqueeze(-1), new_priors, state.priors))
    after = torch.where(pending, loops * (count - 1 - position), 0)
    _drift(state, start + loops, after, loops * max(count - 1, 0), lr)
    state.steps += loops * count
    return state
