"""Label-free foreground gating on the frozen view (paper §3.2, docs/protocol/vmfproto.md).

``attention_pca`` (default, Eqs. attn_gating, refine_pca, fg_binary): the region
R = {patches whose min-max-normalised CLS attention ≥ 0.5} (the top 25% by attention when
|R| < 2); ``v`` = top eigenvector of the uncentred ``Σ_{i∈R} t_i t_iᵀ`` of the frozen tokens;
its sign is chosen so that ``corr(vᵀt, m_attn) ≥ 0``; ``m = minmax(vᵀt)``; ``w = [m ≥ τ]``.
Ablation variants: ``pca`` (first principal component of the image's centred tokens over all
patches, no attention-based sign: the sign convention of scikit-learn's ``svd_flip``, largest
|coordinate| of v positive, so the result is reproducible), ``attention`` (``w = [minmax(m_attn) ≥ τ]``)
and ``none`` (every patch). An image left with no foreground patch falls back to all patches.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from methods.common.precision import float32_island

GATING_VARIANTS: tuple[str, ...] = ("attention_pca", "pca", "attention", "none")
#: the variants that read the CLS attention (a trunk without a CLS token, SigLIP, cannot run them)
ATTENTION_GATES: frozenset[str] = frozenset({"attention_pca", "attention"})
REGION_THRESHOLD = 0.5  # R: normalised attention ≥ 0.5 (docs/protocol/vmfproto.md)
REGION_TOP_FRACTION = 0.25  # fallback R: the top 25% of patches by attention


def minmax_normalise(x: Tensor) -> Tensor:
    """Min-max normalise the last dimension to [0, 1]; a constant row maps to 0."""
    low = x.amin(dim=-1, keepdim=True)
    span = x.amax(dim=-1, keepdim=True) - low
    return torch.where(span > 0, (x - low) / span.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


#: subspace iteration of the top eigenvector (:func:`top_eigenvector`): block size, power steps
#: (checked after the first ``SUBSPACE_STEPS[0]``, continued to ``SUBSPACE_STEPS[1]`` if an image
#: is not yet accepted), and the acceptance test ``‖G u − θ₁u‖ ≤ RESIDUAL_TOLERANCE · (θ₁ − θ₂)``
#: (the angle to the exact eigenvector is then ≲ 1e-9, Davis–Kahan) with a relative eigengap
#: ``(θ₁ − θ₂)/θ₁ ≥ MIN_RELATIVE_GAP``; any other image falls back to ``eigh``
SUBSPACE_SIZE, SUBSPACE_STEPS = 8, (8, 24)
RESIDUAL_TOLERANCE, MIN_RELATIVE_GAP = 1e-9, 1e-3


def _gram(x: Tensor) -> tuple[Tensor, bool]:
    """The smaller of ``XXᵀ`` (N×N, when N < D; returned with ``True``) and ``XᵀX`` (D×D):
    the same non-zero spectrum, ``v = Xᵀu/‖Xᵀu‖`` for a top eigenvector ``u`` of ``XXᵀ``."""
    if x.shape[-2] < x.shape[-1]:
        return x @ x.transpose(-1, -2), True
    return x.transpose(-1, -2) @ x, False


def _to_direction(x: Tensor, u: Tensor, via_rows: bool) -> Tensor:
    if not via_rows:
        return u
    v = (x.transpose(-1, -2) @ u.unsqueeze(-1)).squeeze(-1)
    return v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


def exact_top_eigenvector(x: Tensor) -> Tensor:
    """Unit top eigenvector of ``Σ_i x_i x_iᵀ`` for every batch element (``x``: B×N×D → B×D),
    by one batched ``torch.linalg.eigh`` of the Gram matrix (:func:`_gram`). The sign is arbitrary."""
    gram, via_rows = _gram(x)
    return _to_direction(x, torch.linalg.eigh(gram)[1][..., -1], via_rows)


def _power_steps(gram: Tensor, basis: Tensor, steps: int) -> Tensor:
    for _ in range(steps):
        basis = torch.linalg.qr(gram @ basis)[0]
    return basis


def _rayleigh_ritz(gram: Tensor, basis: Tensor) -> tuple[Tensor, Tensor]:
    """The top Ritz vector ``u`` of ``gram`` on ``basis`` (Saad, *Numerical Methods for Large
    Eigenvalue Problems*, 2nd ed., §4.3) and whether it passes the acceptance test (module
    constants): (B×n, B bool)."""
    ritz_values, ritz_vectors = torch.linalg.eigh(basis.transpose(-1, -2) @ gram @ basis)
    u = (basis @ ritz_vectors[..., -1:]).squeeze(-1)
    top = ritz_values[..., -1]
    second = ritz_values[..., -2] if basis.shape[-1] > 1 else torch.zeros_like(top)
    residual = torch.linalg.vector_norm((gram @ u.unsqueeze(-1)).squeeze(-1) - top.unsqueeze(-1) * u, dim=-1)
    gap = top - second
    return u, (residual <= RESIDUAL_TOLERANCE * gap) & (gap >= MIN_RELATIVE_GAP * top) & (top > 0)


def _subspace_iteration(gram: Tensor) -> tuple[Tensor, Tensor]:
    """Top eigenvector ``u`` of each symmetric PSD ``gram`` (B×n×n, float64) by block power
    iteration with Rayleigh–Ritz (Saad, §5.2; convergence ∝ (λ_{k+1}/λ₁)^steps), and whether it
    passed the acceptance test: (B×n, B bool)."""
    first, most = SUBSPACE_STEPS
    # a fixed start (the first columns of the Gram matrix plus their mean) keeps the result a
    # function of the input alone
    size = min(SUBSPACE_SIZE, gram.shape[-1])
    basis = _power_steps(gram, torch.linalg.qr(gram[..., :size] + gram.mean(-1, keepdim=True))[0], first)
    u, accepted = _rayleigh_ritz(gram, basis)
    if bool(accepted.all()):
        return u, accepted
    return _rayleigh_ritz(gram, _power_steps(gram, basis, most - first))


def top_eigenvector(x: Tensor) -> Tensor:
    """Unit top eigenvector of ``Σ_i x_i x_iᵀ`` for every batch element (``x``: B×N×D → B×D),
    the same as :func:`exact_top_eigenvector` (the ``eigh`` gate) at a fraction of its cost.

    The Gram matrix (:func:`_gram`) is formed in the input's precision, as for ``eigh``; its top
    eigenvector comes from a float64 subspace iteration (:func:`_subspace_iteration`), which
    only images that fail its acceptance test (a small eigengap, no convergence) replace by the
    exact ``eigh`` (up to two host synchronisations per call, to decide). The sign is arbitrary."""
    gram, via_rows = _gram(x)
    u, accepted = _subspace_iteration(gram.double())
    u = u.to(x.dtype)
    if not bool(accepted.all()):
        rejected = (~accepted).nonzero().squeeze(-1)
        u[rejected] = torch.linalg.eigh(gram[rejected])[1][..., -1]
    return _to_direction(x, u, via_rows)


def attention_region(attention: Tensor) -> Tensor:
    """R of Eq. (refine_pca): B×N bool, normalised attention ≥ 0.5, or the top 25% when |R| < 2."""
    region = minmax_normalise(attention) >= REGION_THRESHOLD
    top_k = min(attention.shape[-1], max(2, math.ceil(REGION_TOP_FRACTION * attention.shape[-1])))
    top = torch.zeros_like(region).scatter_(-1, attention.topk(top_k, dim=-1).indices, True)
    return torch.where((region.sum(-1) < 2).unsqueeze(-1), top, region)


@float32_island  # eigh has no bf16 kernel on CUDA, and CUDA autocast does not widen it (docs/guides/gpu.md)
def foreground_scores(tokens: Tensor, attention: Tensor | None, variant: str) -> Tensor:
    """Foregroundness ``m ∈ [0, 1]`` per patch (Eq. fg_mask), B×N, for a gating ``variant``
    other than ``none``. ``tokens``: B×N×D frozen tokens; ``attention``: B×N CLS→patch (None
    only for the variants outside ``ATTENTION_GATES``)."""
    tokens = tokens.to(torch.promote_types(tokens.dtype, torch.float32))
    if variant in ATTENTION_GATES:
        if attention is None:
            raise ValueError(f"gating {variant!r} reads the CLS attention, but the batch has none")
        attention = attention.to(tokens.dtype)
    if variant == "attention":
        return minmax_normalise(attention)  # Eq. (attn_gating)
    if variant == "attention_pca":
        region = attention_region(attention)
        # the R rows of each image first, zero rows as padding up to the largest |R| of the batch
        order = region.to(torch.uint8).argsort(dim=-1, descending=True, stable=True)[:, : int(region.sum(-1).max())]
        rows = tokens.gather(1, order.unsqueeze(-1).expand(-1, -1, tokens.shape[-1]))
        v = top_eigenvector(rows * region.gather(1, order).unsqueeze(-1))  # Eq. (refine_pca), uncentred
        m = (tokens @ v.unsqueeze(-1)).squeeze(-1)
        covariance = ((m - m.mean(-1, keepdim=True)) * (attention - attention.mean(-1, keepdim=True))).sum(-1)
        m = torch.where((covariance < 0).unsqueeze(-1), -m, m)  # sign: corr(vᵀt, m_attn) ≥ 0
        return minmax_normalise(m)
    if variant == "pca":
        centred = tokens - tokens.mean(dim=-2, keepdim=True)
        v = top_eigenvector(centred)
        pivot = v.gather(-1, v.abs().argmax(dim=-1, keepdim=True))  # svd_flip sign convention
        v = torch.where(pivot < 0, -v, v)
        return minmax_normalise((centred @ v.unsqueeze(-1)).squeeze(-1))
    raise ValueError(f"unknown gating variant {variant!r}; choose one of {', '.join(GATING_VARIANTS)}")


def foreground_mask(tokens: Tensor, attention: Tensor | None, variant: str, tau: float) -> tuple[Tensor, Tensor]:
    """Binary gate ``w = [m ≥ τ]`` (Eq. fg_binary), B×N bool, and a B bool marking the images
    that had no foreground patch and fell back to all patches."""
    if variant == "none":
        mask = torch.ones(tokens.shape[:2], dtype=torch.bool, device=tokens.device)
    else:
        mask = foreground_scores(tokens, attention, variant) >= tau
    fallback = ~mask.any(dim=-1)
    return mask | fallback.unsqueeze(-1), fallback
