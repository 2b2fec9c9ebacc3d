"""NPPP's foreground rule (official ``zijizhu/proto-non-param``, modeling/pnp.py ``PCA``): the
first principal component of the whole batch's normalised frozen tokens, min-max normalised over
the batch; a patch is foreground iff its score is ≤ 0.5.

``torch.pca_lowrank`` draws its random test matrix from torch's global RNG. ``first_principal_component``
runs the same randomised range finder (torch._lowrank: Halko, Martinsson & Tropp 2009,
Alg. 4.4 with ``niter`` power iterations, then Alg. 5.1) with the test matrix drawn from an
explicit ``torch.Generator`` on the CPU, so a run is reproducible and the draw is the same on
every device; with the same draws it returns exactly what
``torch.pca_lowrank(x, q=1, center=True, niter)`` does. The component's *sign*, which decides
which side is "foreground", is not set by the draw but by the sign conventions of the QR and
SVD factorisations applied to the batch's data: it can change from batch to batch (the failure
mode the paper attributes to NPPP), and another linear-algebra backend may pick the other sign.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.common.precision import float32_island
from methods.common.transfer import to_device

SIGN_RULES: tuple[str, ...] = ("native", "attention")


@float32_island  # qr/svd have no bf16 kernel on CUDA, and CUDA autocast does not widen them
def first_principal_component(x: Tensor, niter: int, generator: torch.Generator, *,
                              backend_sign: bool = True) -> Tensor:
    """Coordinates ``U[:, 0]`` of the M rows of ``x`` (M×D) on the first left singular vector of
    the column-centred ``x``, as ``torch.pca_lowrank(x, q=1, center=True, niter=niter)[0][:, 0]``.

    The closing SVD (Halko et al. Alg. 5.1) factorises the 1×D matrix ``b = qᵀa``, whose SVD is
    ``[σ] · ‖b‖ · σb/‖b‖`` with σ = ±1 the backend's sign convention (LAPACK: −sign(b₁)); it sets
    nothing but σ. ``backend_sign=False`` returns the same vector with σ = +1 and no SVD, for
    callers that fix the sign themselves: on CUDA ``torch.linalg.svd`` reads cuSOLVER's status on
    the host, a sync per call."""
    a = x.to(torch.promote_types(x.dtype, torch.float32))
    a = a - a.mean(dim=0, keepdim=True)
    wide = a.shape[0] < a.shape[1]  # torch._lowrank works on the tall orientation
    if wide:
        a = a.mT
    test_matrix = to_device(torch.randn(a.shape[1], 1, generator=generator, dtype=a.dtype), a.device)
    q = torch.linalg.qr(a @ test_matrix).Q
    for _ in range(niter):
        q = torch.linalg.qr(a.mT @ q).Q
        q = torch.linalg.qr(a @ q).Q
    if not backend_sign:
        return F.normalize(a.mT @ q, dim=0)[:, 0] if wide else q[:, 0]  # bᵀ/‖b‖ or q: σ = +1
    u, _, vh = torch.linalg.svd(q.mT @ a, full_matrices=False)
    return (vh.mT if wide else q @ u)[:, 0]


def pca_foreground(raw: Tensor, attention: Tensor, *, threshold: float, niter: int, sign: str,
                   generator: torch.Generator) -> Tensor:
    """B×N bool foreground mask of a batch (pnp.py ``PCA.forward`` with ``compare_fn="le"``).

    ``raw`` B×N×D normalised frozen tokens; ``attention`` B×N CLS→patch attention, read only by
    ``sign="attention"``: the component is negated when its covariance with the attention over
    the batch is positive, so that the foreground (low) side is the attended one. ``"native"``
    keeps the sign the factorisations return (the official behaviour).
    """
    if sign not in SIGN_RULES:
        raise ValueError(f"unknown sign rule {sign!r}; choose one of {', '.join(SIGN_RULES)}")
    b, n, d = raw.shape
    # the attention rule sets the sign itself: no SVD (no host sync on CUDA)
    u = first_principal_component(raw.reshape(b * n, d), niter, generator, backend_sign=sign == "native").view(b, n)
    if sign == "attention":
        attn = attention.to(u.dtype)
        covariance = ((u - u.mean()) * (attn - attn.mean())).sum()
        u = torch.where(covariance > 0, -u, u)
    low, span = u.min(), u.max() - u.min()
    score = (u - low) / span.clamp_min(torch.finfo(u.dtype).tiny)  # min-max over the whole batch
    return score <= threshold
