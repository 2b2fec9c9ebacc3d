"""Random token sets for the foreground gate (tests/methods/test_vmfproto_gating.py and
tests/helpers/measure_gate.py): a dominant direction, pure Gaussian, rank 2 and constant images."""
from __future__ import annotations

import torch


def token_sets(count: int, patches: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` images of ``patches`` tokens: layer-normed tokens around a per-image direction
    (a dominant eigenvalue, as a ViT's), pure Gaussian tokens (eigengap ≈ 0: the fallback), rank-2
    tokens and a constant image, with random attention."""
    g = torch.Generator().manual_seed(seed)
    quarter = count // 4
    shared = torch.nn.functional.layer_norm(
        2 * torch.randn(quarter, 1, dim, generator=g) + torch.randn(quarter, patches, dim, generator=g), (dim,))
    gaussian = torch.randn(quarter, patches, dim, generator=g)
    low_rank = torch.randn(quarter, patches, 2, generator=g) @ torch.randn(quarter, 2, dim, generator=g)
    constant = torch.ones(count - 3 * quarter, patches, dim)
    tokens = torch.cat([shared, gaussian, low_rank, constant])
    return tokens, torch.rand(count, patches, generator=g)
