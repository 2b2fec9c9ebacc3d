"""Entropic optimal transport in the log domain (Cuturi 2013; Peyré & Cuturi 2019, §4.4).

Used by vMFProto (Eq. entropic_ot: rows 1/M, columns π_c, 10 iterations) and NPPP (uniform
columns, 3 iterations), both through :func:`grouped_hard_assignment`. Both pass *scores* to
maximise, not costs.
"""
from __future__ import annotations

import torch
from torch import Tensor

from methods.common.precision import float32_island


@float32_island
def sinkhorn_log(
    scores: Tensor,
    row_marginal: Tensor,
    col_marginal: Tensor,
    epsilon: float,
    iterations: int,
) -> Tensor:
    """Plan ``Q = argmax_{Q ≥ 0} ⟨Q, S⟩ + ε H(Q)`` s.t. ``Q1 = a``, ``Qᵀ1 = b`` (Eq. entropic_ot).

    ``scores`` is ``…×M×J``, ``row_marginal`` ``…×M`` and ``col_marginal`` ``…×J`` (leading
    dimensions batch independent problems). Rows with zero mass are padding: they get an
    all-zero row of the plan and do not influence the others, so problems of different
    sizes can be solved in one padded batch (every problem needs at least one row of mass;
    scores must be finite, padding included).

    Each iteration updates the column potential, then the row potential, so the returned plan
    meets the row marginal exactly; this is the iteration of POT's ``ot.sinkhorn`` (Sinkhorn–Knopp,
    ``numItermax = iterations``) with ``M = −S`` and ``reg = ε``, written with potentials
    ``log Q_ij = S_ij/ε + f_i + g_j`` and log-sum-exp so that small ε cannot overflow.
    """
    if iterations < 1:
        raise ValueError(f"Sinkhorn needs at least one iteration, got {iterations}")
    if epsilon <= 0:
        raise ValueError(f"Sinkhorn needs epsilon > 0, got {epsilon}")
    log_kernel = scores / epsilon
    log_a = torch.log(row_marginal.to(log_kernel.dtype))  # −inf on padding rows
    log_b = torch.log(col_marginal.to(log_kernel.dtype))
    # POT starts from a uniform row scaling; padding rows start (and stay) at zero mass
    f = torch.where(row_marginal > 0, 0.0, float("-inf")).to(log_kernel.dtype)
    g = torch.zeros_like(log_b)
    for _ in range(iterations):
        g = log_b - torch.logsumexp(log_kernel + f.unsqueeze(-1), dim=-2)
        f = log_a - torch.logsumexp(log_kernel + g.unsqueeze(-2), dim=-1)
    return torch.exp(log_kernel + f.unsqueeze(-1) + g.unsqueeze(-2))


def hard_assignment(plan: Tensor) -> Tensor:
    """Hard label of every row, ``argmax_j Q_ij`` (Eq. ot_harden)."""
    return plan.argmax(dim=-1)


@float32_island
def grouped_hard_assignment(scores: Tensor, groups: Tensor, col_marginals: Tensor, *, epsilon: float,
                            iterations: int) -> Tensor:
    """Hard OT label in ``[0, J)`` of every row of ``scores`` (P×J), solved per group: the P_g rows
    of group ``g`` (``groups``: P integers) against its J columns with row marginal 1/P_g and
    column marginal ``col_marginals[g]`` (``col_marginals``: one J-row per group value), then
    ``argmax_j`` (Eqs. entropic_ot, ot_harden). All groups are solved in one zero-padded batch;
    rows keep their order within a group."""
    count, columns = scores.shape
    order = torch.argsort(groups, stable=True)
    present, sizes = torch.unique_consecutive(groups[order], return_counts=True)
    slot = torch.repeat_interleave(torch.arange(len(sizes), device=scores.device), sizes)
    rank = torch.arange(count, device=scores.device) - (sizes.cumsum(0) - sizes)[slot]
    padded = scores.new_zeros(len(sizes), int(sizes.max()), columns)
    padded[slot, rank] = scores[order]
    rows = scores.new_zeros(padded.shape[:2])
    rows[slot, rank] = 1.0 / sizes[slot].to(scores.dtype)
    labels = hard_assignment(sinkhorn_log(padded, rows, col_marginals[present].to(scores.dtype), epsilon, iterations))
    assigned = torch.empty_like(groups)
    assigned[order] = labels[slot, rank]
    return assigned
