"""The von Mises–Fisher normaliser ``log C_D(κ)`` with an exact gradient (pure torch, float64).

Eq. (vmf_pdf): ``C_D(κ) = κ^{ν} / ((2π)^{D/2} I_ν(κ))`` with ``ν = D/2 − 1``, and
``d/dκ log C_D(κ) = −I_{ν+1}(κ)/I_ν(κ) = −A_ν(κ)`` (docs/protocol/vmfproto.md).

How it is computed, for every κ ≥ 0 and D ≥ 2 (no branch on κ):

* For an order ``ν' ≥ 25`` the uniform asymptotic (Debye) expansion (DLMF 10.41.3/10.41.4)
  ``I_ν(νz) ~ e^{νη} / ((2πν)^{1/2} (1+z²)^{1/4}) Σ_k u_k(p)/ν^k``, ``p = (1+z²)^{-1/2}``,
  ``η = 1/p + log(zp/(1+p))``, truncated after ``u_13`` (the first omitted term is below
  4e-17 relative for every p ∈ [0, 1] at ν ≥ 25), gives ``log C`` with the large terms of
  ``ν log κ`` and ``νη`` cancelled analytically:
  ``log C = ν log ν − ν/p + ν log((1+p)/p) − (ν+1) log 2π + ½ log(2πν) − ½ log p − log U``.
  The same expansion of ``I'_ν`` (DLMF 10.41.4, ``v_k = u_k + p(p²−1)(½u_{k−1} + p u'_{k−1})``,
  DLMF 10.41.12) gives the Bessel ratio without cancellation:
  ``B_ν := A_ν(κ)/κ = (p/ν) (1/(1+p) + W/U)``, ``W = Σ_k w_k(p)/ν^k``,
  ``w_k = −p(½u_{k−1} + p u'_{k−1})``.
* For a lower order the ratio is carried down by the three-term recurrence
  ``B_n = 1 / (2(n+1) + κ² B_{n+1})`` (DLMF 10.29.1), which is stable in this direction
  (each step multiplies a relative error by ``κ²B_{n+1}/(2(n+1)+κ²B_{n+1}) < 1``), and the
  normaliser by ``C_D(κ)/C_{D+2}(κ) = 2π B_ν(κ)``.

Everything is evaluated in float64 (float32 inputs are cast and the result cast back). Against
mpmath, for D ∈ [2, 4096] and κ ∈ [1e-4, 1e5]: ``log C_D`` to ~1e-14 relative (absolute ~1e-14
where it crosses zero), ``A_ν`` to ~1e-15 relative (tests/methods/test_vmf_normaliser.py).
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx

from methods.common.precision import float32_island

_DEBYE_MIN_ORDER = 25  # the Debye expansion is used at orders ν ≥ 25 ...
_DEBYE_TERMS = 14  # ... with the polynomials u_0 … u_13
_LOG_2PI = math.log(2.0 * math.pi)

Poly = list[Fraction]  # coefficients in increasing powers of p


def _poly_add(a: Poly, b: Poly) -> Poly:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else Fraction(0)) + (b[i] if i < len(b) else Fraction(0)) for i in range(n)]


def _poly_mul(a: Poly, b: Poly) -> Poly:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def _poly_derivative(a: Poly) -> Poly:
    return [i * a[i] for i in range(1, len(a))] or [Fraction(0)]


def _poly_integral(a: Poly) -> Poly:
    return [Fraction(0)] + [c / (i + 1) for i, c in enumerate(a)]


@lru_cache(maxsize=1)
def _debye_polynomials() -> tuple[tuple[Poly, ...], tuple[Poly, ...]]:
    """Exact ``u_k`` (k < _DEBYE_TERMS) and ``w_k`` (1 ≤ k < _DEBYE_TERMS; w_0 = 0).

    DLMF 10.41.10: ``u_{k+1}(p) = ½p²(1−p²)u_k'(p) + ⅛∫_0^p (1−5t²)u_k(t)dt``, ``u_0 = 1``.
    """
    us: list[Poly] = [[Fraction(1)]]
    half_p2_1mp2 = [Fraction(0), Fraction(0), Fraction(1, 2), Fraction(0), Fraction(-1, 2)]
    one_m5t2 = [Fraction(1), Fraction(0), Fraction(-5)]
    for _ in range(_DEBYE_TERMS - 1):
        u = us[-1]
        step = _poly_add(
            _poly_mul(half_p2_1mp2, _poly_derivative(u)),
            [c / 8 for c in _poly_integral(_poly_mul(one_m5t2, u))],
        )
        us.append(step)
    ws: list[Poly] = [[Fraction(0)]]
    for u in us[:-1]:
        # w_k = −p(½u_{k−1} + p u'_{k−1})  (from DLMF 10.41.12, v_k − u_k = (1 − p²) w_k)
        inner = _poly_add([c / 2 for c in u], _poly_mul([Fraction(0), Fraction(1)], _poly_derivative(u)))
        ws.append(_poly_mul([Fraction(0), Fraction(-1)], inner))
    return tuple(us), tuple(ws)


@lru_cache(maxsize=64)
def _series_coefficients(twice_order: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Coefficients (increasing powers of p) of ``U(p) = Σ_k u_k(p)/ν^k`` and
    ``W(p) = Σ_k w_k(p)/ν^k`` at ``ν = twice_order / 2``, summed exactly, then rounded."""
    nu = Fraction(twice_order, 2)
    us, ws = _debye_polynomials()

    def combine(polys: tuple[Poly, ...]) -> tuple[float, ...]:
        total: Poly = [Fraction(0)]
        for k, poly in enumerate(polys):
            total = _poly_add(total, [c / nu**k for c in poly])
        return tuple(float(c) for c in total)

    return combine(us), combine(ws)


def _horner(coefficients: tuple[float, ...], p: Tensor) -> Tensor:
    acc = torch.full_like(p, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = acc * p + c
    return acc


def log_normaliser_and_ratio(kappa: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """``(log C_D(κ), A_ν(κ) = I_{ν+1}(κ)/I_ν(κ))`` in float64, elementwise, for κ ≥ 0, D ≥ 2.

    No autograd; see the module docstring for the method. ``A_ν`` is the mean resultant
    length of the vMF and ``−A_ν`` the derivative of ``log C_D``.
    """
    k = kappa.to(torch.float64)
    twice_nu = dim - 2
    steps = max(0, math.ceil(_DEBYE_MIN_ORDER - twice_nu / 2))  # recurrence steps down to ν
    nu_top = twice_nu / 2 + steps
    u_coef, w_coef = _series_coefficients(twice_nu + 2 * steps)

    radius = torch.hypot(k, torch.full_like(k, nu_top))  # ν'/p = sqrt(ν'² + κ²)
    p = nu_top / radius
    log_p = torch.log(p)
    u = _horner(u_coef, p)
    w = _horner(w_coef, p)
    # Debye expansion at order ν' (module docstring), i.e. log C_{D+2·steps}(κ)
    log_c = (
        nu_top * math.log(nu_top)
        - radius
        + nu_top * (torch.log1p(p) - log_p)
        - (nu_top + 1.0) * _LOG_2PI
        + 0.5 * math.log(2.0 * math.pi * nu_top)
        - 0.5 * log_p
        - torch.log(u)
    )
    b = (p / nu_top) * (1.0 / (1.0 + p) + w / u)  # B_{ν'} = A_{ν'}/κ
    k2 = k * k
    for step in range(steps - 1, -1, -1):  # orders ν' − 1, …, ν (DLMF 10.29.1)
        order = twice_nu / 2 + step
        b = 1.0 / (2.0 * (order + 1.0) + k2 * b)
        log_c = log_c + torch.log(b) + _LOG_2PI  # C_D / C_{D+2} = 2π B_ν
    return log_c, k * b


class _LogVMFNormaliser(torch.autograd.Function):
    """``(log C_D(κ), A_ν(κ))`` with the exact derivative ``−A_ν(κ)`` of the first
    (docs/protocol/vmfproto.md); the ratio is an output of its own, not differentiated. Written
    with ``setup_context`` and ``generate_vmap_rule`` so that ``torch.func.vmap`` runs it (the
    vectorised step of ``tune --batch K``, benchmark/run/lockstep.py)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(kappa: Tensor, dim: int) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        value, ratio = log_normaliser_and_ratio(kappa, dim)
        return value.to(kappa.dtype), ratio

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Tensor, int], output: tuple[Tensor, Tensor]) -> None:
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])

    @staticmethod
    def backward(ctx: FunctionCtx, grad: Tensor, _ratio_grad: Tensor | None) -> tuple[Tensor, None]:  # type: ignore[override]
        (ratio,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return (-(grad.to(torch.float64) * ratio)).to(grad.dtype), None


@float32_island
def log_vmf_normaliser(kappa: Tensor, dim: int) -> Tensor:
    """``log C_D(κ)`` of Eq. (vmf_pdf), elementwise, differentiable in κ (κ ≥ 0, D ≥ 2).

    Computed in float64 and returned in ``kappa``'s dtype. ``κ = 0`` gives the log inverse
    surface area of the sphere (the uniform density).
    """
    if dim < 2:
        raise ValueError(f"the vMF normaliser needs dimension D >= 2, got {dim}")
    return _LogVMFNormaliser.apply(kappa, int(dim))[0]


@float32_island
def vmf_mean_resultant(kappa: Tensor, dim: int) -> Tensor:
    """``A_D(κ) = I_{D/2}(κ)/I_{D/2−1}(κ)`` (no autograd), in ``kappa``'s dtype."""
    return log_normaliser_and_ratio(kappa, dim)[1].to(kappa.dtype)
