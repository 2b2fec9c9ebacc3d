"""log C_D(κ) and its gradient against mpmath (an independent arbitrary-precision oracle)."""
from __future__ import annotations

from functools import lru_cache

import mpmath
import numpy as np
import pytest
import torch

from methods.vmfproto.vmf import log_vmf_normaliser, vmf_mean_resultant

DIMS = (2, 3, 64, 384, 768, 1024, 4096)
KAPPAS = tuple(float(k) for k in np.logspace(-4, 5, 12))


def _log_bessel_quadrature(nu: mpmath.mpf, k: mpmath.mpf) -> mpmath.mpf:
    """``log I_ν(κ)`` from DLMF 10.32.2,
    ``I_ν(κ) = (κ/2)^ν / (√π Γ(ν+½)) ∫_{−1}^{1} (1−t²)^{ν−½} e^{κt} dt``,
    by mpmath quadrature split at the peak ``t*`` of the integrand (ν ≥ 1)."""
    a = nu - mpmath.mpf(1) / 2
    peak = (mpmath.sqrt(a * a + k * k) - a) / k  # root of κt² + 2at − κ = 0
    log_peak = a * mpmath.log1p(-peak * peak) + k * peak
    width = mpmath.sqrt(a) / k
    points = [-1, max(peak - 10 * width, (peak - 1) / 2), peak, min(peak + 10 * width, (peak + 1) / 2), 1]
    integral = mpmath.quad(lambda t: mpmath.exp(a * mpmath.log1p(-t * t) + k * t - log_peak), points)
    prefactor = nu * mpmath.log(k / 2) - mpmath.log(mpmath.pi) / 2 - mpmath.loggamma(nu + mpmath.mpf(1) / 2)
    return prefactor + log_peak + mpmath.log(integral)


def _log_bessel(nu: mpmath.mpf, k: mpmath.mpf) -> mpmath.mpf:
    """``log I_ν(κ)``: mpmath.besseli, except where its hypergeometric series would need ~κ
    terms (ν > 1000, κ > 1e4: seconds per call), where DLMF 10.32.2 is integrated instead."""
    if nu > 1000 and k > 1e4:
        return _log_bessel_quadrature(nu, k)
    return mpmath.log(mpmath.besseli(nu, k))


@lru_cache(maxsize=None)
def _reference(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """mpmath ``log C_D(κ)`` and ``I_{D/2}(κ)/I_{D/2−1}(κ)`` on the κ grid (30 digits)."""
    values, ratios = [], []
    with mpmath.workdps(30):
        nu = mpmath.mpf(dim) / 2 - 1
        for kappa in KAPPAS:
            k = mpmath.mpf(kappa)
            log_i = _log_bessel(nu, k)
            values.append(float(nu * mpmath.log(k) - mpmath.mpf(dim) / 2 * mpmath.log(2 * mpmath.pi) - log_i))
            ratios.append(float(mpmath.exp(_log_bessel(nu + 1, k) - log_i)))
    return np.array(values), np.array(ratios)


def test_quadrature_oracle_agrees_with_besseli() -> None:
    with mpmath.workdps(30):
        for nu, k in ((383, 1e5), (2047, 2310.0), (31, 8.0)):
            nu, k = mpmath.mpf(nu), mpmath.mpf(k)
            assert abs(_log_bessel_quadrature(nu, k) / mpmath.log(mpmath.besseli(nu, k)) - 1) < 1e-25


@pytest.mark.parametrize("dim", DIMS)
def test_log_normaliser_matches_mpmath(dim: int) -> None:
    expected, _ = _reference(dim)
    got = log_vmf_normaliser(torch.tensor(KAPPAS, dtype=torch.float64), dim).numpy()
    assert np.all(np.isfinite(got))
    rel = np.abs(got - expected) / np.abs(expected)
    assert rel.max() <= 1e-10, f"D={dim}: worst relative error {rel.max():.2e} at κ={KAPPAS[rel.argmax()]:.3g}"


@pytest.mark.parametrize("dim", DIMS)
def test_gradient_is_minus_bessel_ratio(dim: int) -> None:
    _, ratio = _reference(dim)
    kappa = torch.tensor(KAPPAS, dtype=torch.float64, requires_grad=True)
    log_vmf_normaliser(kappa, dim).sum().backward()
    rel = np.abs(kappa.grad.numpy() + ratio) / ratio
    assert rel.max() <= 1e-8, f"D={dim}: worst relative error {rel.max():.2e}"
    np.testing.assert_allclose(vmf_mean_resultant(kappa.detach(), dim).numpy(), ratio, rtol=1e-8)


@pytest.mark.parametrize("dim", (2, 3, 5, 64, 768, 4096))
def test_gradcheck(dim: int) -> None:
    kappa = torch.tensor([1e-3, 0.3, 2.0, 17.0, 250.0, 3e3], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda k: log_vmf_normaliser(k, dim), (kappa,))


def test_limits_and_dtypes() -> None:
    # κ = 0 is the uniform density: log C_D(0) = −log |S^{D−1}| = log Γ(D/2) − log 2 − (D/2) log π
    for dim in (2, 3, 10, 768, 4096):
        zero = log_vmf_normaliser(torch.zeros(1, dtype=torch.float64), dim).item()
        area = mpmath.log(2) + mpmath.mpf(dim) / 2 * mpmath.log(mpmath.pi) - mpmath.loggamma(mpmath.mpf(dim) / 2)
        assert zero == pytest.approx(-float(area), rel=1e-12)
    # D = 3 closed form: C_3(κ) = κ / (4π sinh κ)
    kappa = torch.tensor([0.01, 1.0, 30.0], dtype=torch.float64)
    closed = torch.log(kappa) - torch.log(4 * torch.pi * torch.sinh(kappa))
    torch.testing.assert_close(log_vmf_normaliser(kappa, 3), closed, rtol=1e-13, atol=0)
    # float32 in → float64 inside → float32 out, finite far outside the grid
    wide = torch.tensor([0.0, 1e-8, 1e6, 1e8])
    for dim in (2, 768, 4096):
        out = log_vmf_normaliser(wide, dim)
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
        torch.testing.assert_close(out, log_vmf_normaliser(wide.double(), dim).float())
    with pytest.raises(ValueError):
        log_vmf_normaliser(kappa, 1)
