"""vMF overlap (Eq. vmf_overlap) vs Monte-Carlo integration; kernel and LogDet properties."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from methods.vmfproto.overlap import log_vmf_overlap, logdet_loss, vmf_kernel
from methods.vmfproto.vmf import log_vmf_normaliser


def _unit(*rows: list[float]) -> torch.Tensor:
    return F.normalize(torch.tensor(rows, dtype=torch.float64), dim=-1)


@pytest.mark.parametrize("dim", [3, 10])  # S² and S⁹
def test_overlap_matches_monte_carlo(dim: int) -> None:
    g = torch.Generator().manual_seed(0)
    mu = F.normalize(torch.randn(3, dim, generator=g, dtype=torch.float64), dim=-1)
    kappa = torch.tensor([1.5, 3.0, 4.5], dtype=torch.float64)
    samples = 400_000
    t = F.normalize(torch.randn(samples, dim, generator=g, dtype=torch.float64), dim=-1)  # uniform on S^{D−1}
    density = torch.exp(log_vmf_normaliser(kappa, dim) + kappa * (t @ mu.T))  # samples×3, Eq. (vmf_pdf)
    area = 2 * math.pi ** (dim / 2) / math.gamma(dim / 2)
    closed = torch.exp(log_vmf_overlap(mu, kappa))
    for j in range(3):
        for k in range(3):
            product = density[:, j] * density[:, k]
            estimate = area * product.mean()
            stderr = area * product.std() / math.sqrt(samples)
            assert stderr < 0.02 * estimate  # the check below is informative
            assert abs(estimate - closed[j, k]) < 4 * stderr, (j, k, estimate.item(), closed[j, k].item())


def test_kernel_properties_and_gradients() -> None:
    mu = _unit([1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0])
    kappa = torch.tensor([2.0, 8.0, 2.0, 2.0], dtype=torch.float64, requires_grad=True)
    kernel = vmf_kernel(mu, kappa)
    torch.testing.assert_close(kernel, kernel.T)
    torch.testing.assert_close(torch.diagonal(kernel), torch.ones(4, dtype=torch.float64))
    assert kernel[0, 2].item() == pytest.approx(1.0)  # identical components
    assert 0 < kernel[0, 3] < kernel[0, 1] < 1  # antipodal < nearby
    assert torch.linalg.eigvalsh(kernel).min() > -1e-12  # a Gram matrix of L² functions
    kernel.sum().backward()
    assert torch.isfinite(kappa.grad).all()


def test_logdet_prefers_separated_components() -> None:
    dim, j = 16, 4
    separated = torch.eye(dim, dtype=torch.float64)[:j]
    g = torch.Generator().manual_seed(1)
    jitter = 0.05 * torch.randn(j, dim, generator=g, dtype=torch.float64)
    overlapping = F.normalize(torch.ones(j, dim, dtype=torch.float64) + jitter, dim=-1)
    kappa = torch.full((j,), 20.0, dtype=torch.float64)
    mu = torch.stack([separated, overlapping])  # two "classes", C×J×D
    per_class = [logdet_loss(mu[c : c + 1], kappa.unsqueeze(0), 1e-4) for c in range(2)]
    assert per_class[0] < per_class[1]
    assert per_class[0] == pytest.approx(-j * math.log(1 + 1e-4), abs=1e-2)  # K ≈ I when components are apart
    torch.testing.assert_close(logdet_loss(mu, kappa.expand(2, j), 1e-4), (per_class[0] + per_class[1]) / 2)
    # float32 parameters in → float32 loss out, with a gradient towards separation
    mu32 = overlapping.float().unsqueeze(0).requires_grad_(True)
    loss = logdet_loss(mu32, torch.full((1, j), 20.0), 1e-4)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(mu32.grad).all() and mu32.grad.abs().sum() > 0


def test_a_failed_cholesky_factor_is_a_nan_term_not_a_host_read() -> None:
    """K + δI not positive definite (δ = −2 here; diverged parameters in a run): the factor fails
    without the host reading its status, and the term is NaN, which the training loop reports."""
    mu = _unit([1.0, 0.0, 0.0], [0.0, 1.0, 0.0]).unsqueeze(0)
    kappa = torch.full((1, 2), 10.0, dtype=torch.float64)
    assert torch.isfinite(logdet_loss(mu, kappa, 1e-4))
    assert torch.isnan(logdet_loss(mu, kappa, -2.0))
