"""Foreground gating (methods/vmfproto/gating.py) on synthetic tokens with a planted foreground."""
from __future__ import annotations

import pytest
import torch
from gating_token_sets import token_sets

from methods.vmfproto import gating
from methods.vmfproto.gating import exact_top_eigenvector, foreground_mask, foreground_scores, top_eigenvector

SIDE, DIM = 8, 32


def _planted(seed: int, flip: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One image: a 4×4 foreground block along direction ±f, background along b ⟂ f, and a
    CLS attention that is peaked on the foreground but imperfect (two background artefacts
    with high attention, three foreground patches with low attention)."""
    g = torch.Generator().manual_seed(seed)
    fg = torch.zeros(SIDE, SIDE, dtype=torch.bool)
    fg[2:6, 3:7] = True
    fg = fg.flatten()
    f, b = torch.eye(DIM)[0], torch.eye(DIM)[1]
    direction = torch.where(fg.unsqueeze(-1), (-2.0 if flip else 2.0) * f, 2.0 * b)
    tokens = direction + 0.2 * torch.randn(SIDE * SIDE, DIM, generator=g)
    attention = torch.where(fg, 1.0, 0.1) + 0.05 * torch.rand(SIDE * SIDE, generator=g)
    attention[[0, 9]] = 0.9  # background artefacts
    attention[fg.nonzero().squeeze(-1)[:3]] = 0.2  # weakly attended foreground
    return tokens, attention, fg


def test_attention_pca_recovers_planted_foreground_for_either_sign() -> None:
    tokens, attention, fg = _planted(0)
    flipped, _, _ = _planted(0, flip=True)
    both = torch.stack([tokens, flipped])
    mask, fallback = foreground_mask(both, torch.stack([attention, attention]), "attention_pca", 0.5)
    assert torch.equal(mask[0], fg) and torch.equal(mask[1], fg)
    assert not fallback.any()
    # the attention prior alone is wrong on the artefacts; the PCA refinement fixes them
    attention_only, _ = foreground_mask(tokens.unsqueeze(0), attention.unsqueeze(0), "attention", 0.5)
    assert not torch.equal(attention_only[0], fg)


def test_pca_variant_has_no_attention_sign_fix() -> None:
    tokens, attention, fg = _planted(1)
    batch = torch.stack([tokens, -tokens])
    scores = foreground_scores(batch, torch.stack([attention, attention]), "pca")
    # negating the tokens keeps v (same covariance, fixed sign convention) and mirrors the scores
    torch.testing.assert_close(scores[1], 1.0 - scores[0], atol=1e-5, rtol=0)
    mask, _ = foreground_mask(batch, torch.stack([attention, attention]), "pca", 0.5)
    assert torch.equal(mask[0], fg) != torch.equal(mask[1], fg)  # exactly one polarity is right
    assert torch.equal(mask[0], ~mask[1])


def test_fallback_and_none() -> None:
    tokens, attention, fg = _planted(2)
    constant_tokens = torch.ones(SIDE * SIDE, DIM)
    constant_attention = torch.full((SIDE * SIDE,), 0.3)
    batch_tokens = torch.stack([tokens, constant_tokens])
    batch_attention = torch.stack([attention, constant_attention])
    for variant in ("attention_pca", "attention", "pca"):
        mask, fallback = foreground_mask(batch_tokens, batch_attention, variant, 0.5)
        assert fallback.tolist() == [False, True], variant
        assert mask[1].all()  # falls back to all patches
    mask, fallback = foreground_mask(batch_tokens, batch_attention, "none", 0.5)
    assert mask.all() and not fallback.any()
    # τ = 0 keeps every patch without a fallback
    mask, fallback = foreground_mask(batch_tokens, batch_attention, "attention_pca", 0.0)
    assert mask.all() and not fallback.any()
    with pytest.raises(ValueError):
        foreground_scores(batch_tokens, batch_attention, "saliency")


@pytest.mark.parametrize("patches", [5, 40])  # Gram route (N < D) and covariance route
def test_top_eigenvector(patches: int) -> None:
    x = torch.randn(3, patches, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    v = top_eigenvector(x)
    _, vectors = torch.linalg.eigh(x.transpose(1, 2) @ x)
    torch.testing.assert_close((v * vectors[..., -1]).sum(-1).abs(), torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize(("patches", "dim"), [(64, 96), (96, 48)])  # Gram route (N < D) and covariance route
def test_iterative_gate_equals_the_eigh_gate(patches: int, dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens, attention = token_sets(40, patches, dim, seed=patches)
    gram, _ = gating._gram(tokens)
    _, accepted = gating._subspace_iteration(gram.double())
    assert 0 < int(accepted.sum()) < len(tokens)  # both the iterative path and the eigh fallback are taken
    v = top_eigenvector(tokens)
    torch.testing.assert_close((v * exact_top_eigenvector(tokens)).sum(-1).abs(), torch.ones(len(tokens)))
    masks = {variant: foreground_mask(tokens, attention, variant, 0.5) for variant in ("attention_pca", "pca")}
    monkeypatch.setattr(gating, "top_eigenvector", exact_top_eigenvector)
    for variant, (mask, fallback) in masks.items():
        exact_mask, exact_fallback = foreground_mask(tokens, attention, variant, 0.5)
        assert torch.equal(mask, exact_mask) and torch.equal(fallback, exact_fallback), variant
