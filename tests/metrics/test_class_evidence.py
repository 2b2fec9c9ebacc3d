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
            peak = max(float(maps[b, j].max()), 0.0)
            if peak == 0.0:
                continue
            for y in range(H):
                for x in range(W):
                    out[b, y, x] += float(contributions[b, j]) * max(float(maps[b, j, y, x]), 0.0) / peak
    return out


def test_equals_a_brute_force_loop_with_negative_and_empty_maps() -> None:
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(3, 4, 5, 6, generator=g, dtype=torch.float64)
    maps[1, 2] = -torch.rand(5, 6, generator=g, dtype=torch.float64)  # no positive part: adds nothing
    contributions = torch.randn(3, 4, generator=g, dtype=torch.float64)
    got = class_evidence_maps(maps, contributions)
    assert torch.allclose(got, _loop(maps, contributions), rtol=0, atol=1e-12)


def test_protopnet_reading_is_the_weighted_sum_of_similarity_maps() -> None:
    # ProtoPNet: contribution = w * max sim, map = sim >= 0  ->  sum_j w_j sim_j(x) (Opłatek et al.)
    g = torch.Generator().manual_seed(1)
    sim = torch.rand(2, 3, 7, 7, generator=g, dtype=torch.float64) * 4
    w = torch.randn(2, 3, generator=g, dtype=torch.float64)
    contributions = w * sim.amax(dim=(2, 3))
    expected = torch.einsum("bj,bjhw->bhw", w, sim)
    assert torch.allclose(class_evidence_maps(sim, contributions), expected, rtol=0, atol=1e-12)


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="contributions must be"):
        class_evidence_maps(torch.zeros(2, 3, 4, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="maps must be"):
        class_evidence_maps(torch.zeros(3, 4, 4), torch.zeros(3, 4))
