"""The one explanation convention (metrics/class_evidence.py) against a brute-force loop, and
against Opłatek et al.'s ProtoPNet reading (sum of similarity maps times class connections)."""
from __future__ import annotations

import pytest
import torch

from metrics.class_evidence import class_evidence_maps


def _loop(maps: torch.Tensor, contributions: torch.Tensor) -> torch.Tensor:
    B, J, H, W = maps.shape
    out = torch.zeros(B, H, W, dtype=torch.float64)
    for b in range(B):
        for j in range(J):
            low, high = float(maps[b, j].min()), float(maps[b, j].max())
            for y in range(H):
                for x in range(W):
                    shape = 1.0 if high == low else (float(maps[b, j, y, x]) - low) / (high - low)
                    out[b, y, x] += float(contributions[b, j]) * shape
    return out


def test_equals_a_brute_force_loop_with_negative_and_constant_maps() -> None:
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(3, 4, 5, 6, generator=g, dtype=torch.float64)
    maps[1, 2] = -torch.rand(5, 6, generator=g, dtype=torch.float64)  # all negative: min-max as any other
    maps[2, 1] = 3.5  # constant: its contribution spread evenly
    contributions = torch.randn(3, 4, generator=g, dtype=torch.float64)
    got = class_evidence_maps(maps, contributions)
    assert torch.allclose(got, _loop(maps, contributions), rtol=0, atol=1e-12)


def test_protopnet_reading_is_the_weighted_sum_of_similarity_maps() -> None:
    # ProtoPNet: contribution = w * max sim, map = sim >= 0 with floor 0 -> sum_j w_j sim_j(x) (Opłatek et al.)
    g = torch.Generator().manual_seed(1)
    sim = torch.rand(2, 3, 7, 7, generator=g, dtype=torch.float64) * 4
    sim[..., 0, 0] = 0.0  # far from its prototype the log similarity reaches 0
    w = torch.randn(2, 3, generator=g, dtype=torch.float64)
    contributions = w * sim.amax(dim=(2, 3))
    expected = torch.einsum("bj,bjhw->bhw", w, sim)
    assert torch.allclose(class_evidence_maps(sim, contributions), expected, rtol=0, atol=1e-12)


def test_an_additive_constant_changes_nothing() -> None:
    # vMFProto's maps are log densities: log C_D(kappa) (~ +1457 at D = 768, kappa = 50) plus kappa mu^T x
    g = torch.Generator().manual_seed(2)
    maps = torch.randn(2, 3, 6, 6, generator=g, dtype=torch.float64) * 50
    contributions = torch.randn(2, 3, generator=g, dtype=torch.float64)
    shifted = class_evidence_maps(maps + 1457.1, contributions)
    assert torch.allclose(shifted, class_evidence_maps(maps, contributions), rtol=0, atol=1e-9)
    assert float(shifted.amax() - shifted.amin()) > 0.5  # not flattened by the constant


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="contributions must be"):
        class_evidence_maps(torch.zeros(2, 3, 4, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="maps must be"):
        class_evidence_maps(torch.zeros(3, 4, 4), torch.zeros(3, 4))
