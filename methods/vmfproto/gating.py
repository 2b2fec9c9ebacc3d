"""Label-free foreground gating on the frozen view (paper §3.2, methods.md "Gating").

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
REGION_THRESHOLD = 0.5  # R: normalised attention ≥ 0.5 (methods.md)
REGION_TOP_FRACTION = 0.25  # fallback R: the top 25% of patches by attention


def minmax_normalise(x: Tensor) -> Tensor:
    """Min-max normalise the last dimension to [0, 1]; a constant row maps to 0."""
    low = x.amin(dim=-1, keepdim=True)
    span = x.amax(dim=-1, keepdim=True) - low
    return torch.where(span > 0, (x - low) / span.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(x))


def top_eigenvector(x: Tensor) -> Tensor:
    """Unit top eigenvector of ``Σ_i x_i x_iᵀ`` for every batch element (``x``: B×N×D → B×D).

    One batched ``torch.linalg.eigh``, on the N×N Gram matrix ``XXᵀ`` when N < D (same
    non-zero spectrum; ``v = Xᵀu/‖Xᵀu‖``), else on ``XᵀX``. The sign is arbitrary.
    """
    if x.shape[-2] < x.shape[-1]:
        _, vectors = torch.linalg.eigh(x @ x.transpose(-1, -2))
        v = (x.transpose(-1, -2) @ vectors[..., -1:]).squeeze(-1)
        return v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    _, vectors = torch.linalg.eigh(x.transpose(-1, -2) @ x)
    return vectors[..., -1]


def attention_region(attention: Tensor) -> Tensor:
    """R of Eq. (refine_pca): B×N bool, normalised attention ≥ 0.5, or the top 25% when |R| < 2."""
    region = minmax_normalise(attention) >= REGION_THRESHOLD
    top_k = min(attention.shape[-1], max(2, math.ceil(REGION_TOP_FRACTION * attention.shape[-1])))
    top = torch.zeros_like(region).scatter_(-1, attention.topk(top_k, dim=-1).indices, True)
    return torch.where((region.sum(-1) < 2).unsqueeze(-1), top, region)


@float32_island  # eigh has no bf16 kernel on CUDA, and CUDA autocast does not widen it (README, GPU)
def foreground_scores(tokens: Tensor, attention: Tensor, variant: str) -> Tensor:
    """Foregroundness ``m ∈ [0, 1]`` per patch (Eq. fg_mask), B×N, for a gating ``variant``
    other than ``none``. ``tokens``: B×N×D frozen tokens; ``attention``: B×N CLS→patch."""
    tokens = tokens.to(torch.promote_types(tokens.dtype, torch.float32))
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


def foreground_mask(tokens: Tensor, attention: Tensor, variant: str, tau: float) -> tuple[Tensor, Tensor]:
    """Binary gate ``w = [m ≥ τ]`` (Eq. fg_binary), B×N bool, and a B bool marking the images
    that had no foreground patch and fell back to all patches."""
    if variant == "none":
        mask = torch.ones(attention.shape, dtype=torch.bool, device=attention.device)
    else:
        mask = foreground_scores(tokens, attention, variant) >= tau
    fallback = ~mask.any(dim=-1)
    return mask | fallback.unsqueeze(-1), fallback
