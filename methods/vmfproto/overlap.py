"""vMF overlap kernel and the LogDet diversity loss, all in log space (paper §3.4)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.common.precision import float32_island
from methods.vmfproto.vmf import log_vmf_normaliser


def log_vmf_overlap(mu: Tensor, kappa: Tensor) -> Tensor:
    """``log S_jj'`` (Eq. vmf_overlap) for every pair of components of every group.

    ``mu`` is ``…×J×D`` (unit rows), ``kappa`` ``…×J``; returns ``…×J×J`` with
    ``log S_jj' = log C_D(κ_j) + log C_D(κ_j') − log C_D(‖κ_j μ_j + κ_j' μ_j'‖)``.
    """
    dim = mu.shape[-1]
    natural = kappa.unsqueeze(-1) * mu  # κ μ, …×J×D
    resultant = torch.linalg.vector_norm(natural.unsqueeze(-2) + natural.unsqueeze(-3), dim=-1)
    log_c = log_vmf_normaliser(kappa, dim)
    return log_c.unsqueeze(-1) + log_c.unsqueeze(-2) - log_vmf_normaliser(resultant, dim)


def vmf_kernel(mu: Tensor, kappa: Tensor) -> Tensor:
    """Normalised overlap ``K_jj' = S_jj' / sqrt(S_jj S_j'j')`` (Eq. vmf_kernel), ``…×J×J``,
    computed as ``exp(log S_jj' − ½ log S_jj − ½ log S_j'j')``."""
    log_s = log_vmf_overlap(mu, kappa)
    half_diag = 0.5 * torch.diagonal(log_s, dim1=-2, dim2=-1)
    return torch.exp(log_s - half_diag.unsqueeze(-1) - half_diag.unsqueeze(-2))


@float32_island
def logdet_loss(mu: Tensor, kappa: Tensor, delta: float) -> Tensor:
    """``L_logdet = −(1/C) Σ_c log det(K^(c) + δI)`` (Eq. logdet), batched over classes.

    ``mu`` is ``C×J×D`` (normalised here), ``kappa`` ``C×J``. The kernel and the
    determinant are computed in float64 (a Cholesky factor: ``K + δI`` is positive
    definite); the loss is returned in ``mu``'s dtype.
    """
    kernel = vmf_kernel(F.normalize(mu.to(torch.float64), dim=-1), kappa.to(torch.float64))
    eye = torch.eye(kernel.shape[-1], dtype=kernel.dtype, device=kernel.device)
    # cholesky_ex: no host read of the factorisation's status (a sync per step on CUDA); a failed
    # factor (diverged parameters) makes the term NaN, which the training loop reports at the epoch end
    chol, info = torch.linalg.cholesky_ex(kernel + delta * eye)
    logdet = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    return torch.where((info == 0).all(), -logdet.mean(), torch.nan).to(mu.dtype)
