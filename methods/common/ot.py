"""Entropic optimal transport in the log domain (Cuturi 2013; Peyré & Cuturi 2019, §4.4).

Used by vMFProto (Eq. entropic_ot: rows 1/M, columns π_c, 10 iterations) and NPPP (uniform
columns, 3 iterations), both through :func:`grouped_hard_assignment`. Both pass *scores* to
maximise, not costs.
"""
from __future__ import annotations

from typing import NamedTuple

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
    tolerance: float | None = None,
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

    Each column is first shifted by its maximum over the rows with mass. The plan, after any
    number of iterations, is unchanged: the first update of every iteration sets
    ``g_j = log b_j − logsumexp_i(S_ij/ε + f_i)``, so a constant ``c_j`` subtracted from column j
    comes back as ``g_j + c_j/ε`` and ``S_ij/ε + g_j`` is the same (the plan is ``diag(u) K diag(v)``,
    Peyré & Cuturi 2019 §4.2, and ``v`` absorbs a column scaling of ``K``). A per-row shift
    would not be exact here: the first column update reads the rows through ``f = 0``. What changes is the
    float32 rounding: vMFProto's scores are ``log C_D(κ) + κ μᵀt`` ≈ −1.5e3 for D = 768, and
    ``S/ε`` ≈ −3e4 has a spacing of 4e-3, enough to flip near-tied hard labels.

    ``tolerance``: iterate until the L1 error of every problem's column marginal
    (:func:`column_marginal_error`) is at most ``tolerance``, with ``iterations`` as the cap;
    ``None`` runs exactly ``iterations`` iterations.
    """
    if iterations < 1:
        raise ValueError(f"Sinkhorn needs at least one iteration, got {iterations}")
    if epsilon <= 0:
        raise ValueError(f"Sinkhorn needs epsilon > 0, got {epsilon}")
    if tolerance is not None and not tolerance > 0:
        raise ValueError(f"Sinkhorn tolerance must be > 0 or None, got {tolerance}")
    mass = (row_marginal > 0).unsqueeze(-1)
    column_max = torch.where(mass, scores, float("-inf")).amax(dim=-2, keepdim=True)
    log_kernel = torch.where(mass, (scores - column_max) / epsilon, 0.0)
    log_a = torch.log(row_marginal.to(log_kernel.dtype))  # −inf on padding rows
    b = col_marginal.to(log_kernel.dtype)
    log_b = torch.log(b)
    # POT starts from a uniform row scaling; padding rows start (and stay) at zero mass
    f = torch.where(row_marginal > 0, 0.0, float("-inf")).to(log_kernel.dtype)
    g = torch.zeros_like(log_b)
    for iteration in range(iterations):
        log_columns = torch.logsumexp(log_kernel + f.unsqueeze(-1), dim=-2)  # log Σ_i exp(S_ij/ε + f_i)
        if tolerance is not None and iteration > 0:
            error = (torch.exp(log_columns + g) - b).abs().sum(-1)  # the current plan's column sums vs b
            if bool((error <= tolerance).all()):
                break
        g = log_b - log_columns
        f = log_a - torch.logsumexp(log_kernel + g.unsqueeze(-2), dim=-1)
    return torch.exp(log_kernel + f.unsqueeze(-1) + g.unsqueeze(-2))


def column_marginal_error(plan: Tensor, col_marginal: Tensor) -> Tensor:
    """``‖Qᵀ1 − b‖₁`` of every problem (``plan`` …×M×J, ``col_marginal`` …×J → …): how far a
    plan whose rows are exact is from the column constraint (0 at convergence, at most 2)."""
    return (plan.sum(dim=-2) - col_marginal.to(plan.dtype)).abs().sum(dim=-1)


def hard_assignment(plan: Tensor) -> Tensor:
    """Hard label of every row, ``argmax_j Q_ij`` (Eq. ot_harden)."""
    return plan.argmax(dim=-1)


class GroupedAssignment(NamedTuple):
    """Hard OT labels of the rows and the column-marginal error of each group's plan."""

    labels: Tensor  # P, in [0, J)
    groups: Tensor  # G, the group values present, ascending
    column_error: Tensor  # G, ‖Qᵀ1 − b‖₁ of each group's plan


@float32_island
def grouped_hard_assignment(scores: Tensor, groups: Tensor, col_marginals: Tensor, *, epsilon: float,
                            iterations: int, tolerance: float | None = None) -> GroupedAssignment:
    """Hard OT label in ``[0, J)`` of every row of ``scores`` (P×J), solved per group: the P_g rows
    of group ``g`` (``groups``: P integers) against its J columns with row marginal 1/P_g and
    column marginal ``col_marginals[g]`` (``col_marginals``: one J-row per group value), then
    ``argmax_j`` (Eqs. entropic_ot, ot_harden). All groups are solved in one zero-padded batch;
    rows keep their order within a group. ``tolerance`` as in :func:`sinkhorn_log`."""
    count, columns = scores.shape
    order = torch.argsort(groups, stable=True)
    present, sizes = torch.unique_consecutive(groups[order], return_counts=True)
    slot = torch.repeat_interleave(torch.arange(len(sizes), device=scores.device), sizes)
    rank = torch.arange(count, device=scores.device) - (sizes.cumsum(0) - sizes)[slot]
    padded = scores.new_zeros(len(sizes), int(sizes.max()), columns)
    padded[slot, rank] = scores[order]
    rows = scores.new_zeros(padded.shape[:2])
    rows[slot, rank] = 1.0 / sizes[slot].to(scores.dtype)
    targets = col_marginals[present].to(scores.dtype)
    plan = sinkhorn_log(padded, rows, targets, epsilon, iterations, tolerance)
    labels = hard_assignment(plan)
    assigned = torch.empty_like(groups)
    assigned[order] = labels[slot, rank]
    return GroupedAssignment(assigned, present, column_marginal_error(plan, targets))
