"""Entropic optimal transport in the log domain (Cuturi 2013; Peyré & Cuturi 2019, §4.4).

Used by vMFProto (Eq. entropic_ot: rows 1/M, columns π_c, 10 iterations) and NPPP (uniform
columns, 3 iterations), both through :func:`grouped_hard_assignment`. Both pass *scores* to
maximise, not costs.

The grouped form solves the problems of all classes of a batch at once without a host
synchronisation (docs/guides/gpu.md, "Host syncs per training step"): the rows stay where they are, each
tagged with its problem, and every reduction over a problem's rows is a per-group reduction of
fixed shape G×J (``scatter_reduce`` for maxima; for sums a one-hot matmul on CUDA, which is
deterministic there, ``index_add_`` elsewhere), so no size is read from the device and no
G × max-rows padding is built.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.common.precision import float32_island


class _Batched:
    """Problems along the leading dimensions of ``…×M×J`` scores: row reductions over dim −2."""

    @staticmethod
    def column_max(x: Tensor) -> Tensor:
        return x.amax(dim=-2)

    @staticmethod
    def column_logsumexp(x: Tensor) -> Tensor:
        return torch.logsumexp(x, dim=-2)

    @staticmethod
    def to_rows(per_problem: Tensor) -> Tensor:
        return per_problem.unsqueeze(-2)


class _Grouped:
    """G problems whose rows are interleaved in P×J scores, row i in problem ``groups[i]``:
    per-problem reductions of fixed shape G×J (no host synchronisation)."""

    def __init__(self, groups: Tensor, num_groups: int, dtype: torch.dtype, *, by_matmul: bool | None = None) -> None:
        self.groups, self.num_groups = groups, num_groups
        # on CUDA (``by_matmul`` None) the sums are a one-hot matmul (P×G): scatter-adds there are
        # atomics, in no fixed order; elsewhere index_add_ adds the rows in order, without the
        # G-fold work of the matmul
        if by_matmul is None:
            by_matmul = groups.device.type == "cuda"
        self.member = F.one_hot(groups, num_groups).to(dtype) if by_matmul else None

    def column_max(self, x: Tensor) -> Tensor:
        index = self.groups.unsqueeze(-1).expand_as(x)
        return x.new_full((self.num_groups, x.shape[-1]), float("-inf")).scatter_reduce(0, index, x, "amax")

    def column_sums(self, x: Tensor) -> Tensor:
        """``Σ_{i in g} x_ij``, G×J (deterministic on every device)."""
        if self.member is not None:
            return self.member.T @ x
        return x.new_zeros(self.num_groups, x.shape[-1]).index_add(0, self.groups, x)  # out of place: vmap-safe

    def column_logsumexp(self, x: Tensor) -> Tensor:
        shift = self.column_max(x)
        shift = torch.where(torch.isfinite(shift), shift, 0.0)  # a problem without rows: log 0 = −inf below
        return torch.log(self.column_sums(torch.exp(x - shift[self.groups]))) + shift

    def to_rows(self, per_problem: Tensor) -> Tensor:
        return per_problem[self.groups]


@float32_island
def sinkhorn_log(
    scores: Tensor,
    row_marginal: Tensor,
    col_marginal: Tensor,
    epsilon: float,
    iterations: int,
    tolerance: float | None = None,
    *,
    groups: Tensor | None = None,
) -> Tensor:
    """Plan ``Q = argmax_{Q ≥ 0} ⟨Q, S⟩ + ε H(Q)`` s.t. ``Q1 = a``, ``Qᵀ1 = b`` (Eq. entropic_ot).

    ``scores`` is ``…×M×J``, ``row_marginal`` ``…×M`` and ``col_marginal`` ``…×J`` (leading
    dimensions batch independent problems). Rows with zero mass are padding: they get an
    all-zero row of the plan and do not influence the others, so problems of different
    sizes can be solved in one padded batch (every problem needs at least one row of mass;
    scores must be finite, padding included).

    ``groups`` (P integers in ``[0, G)``) stacks G problems without padding instead: ``scores``
    is P×J, ``row_marginal`` P, ``col_marginal`` G×J, and row i belongs to problem
    ``groups[i]``; every problem is solved exactly as alone (a problem without a row of mass
    gets no plan rows, and its column potential stays 0).

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
    ``None`` runs exactly ``iterations`` iterations. The test reads the device once per
    iteration (docs/guides/gpu.md, "Host syncs per training step"); ``None`` reads nothing.
    """
    if iterations < 1:
        raise ValueError(f"Sinkhorn needs at least one iteration, got {iterations}")
    if epsilon <= 0:
        raise ValueError(f"Sinkhorn needs epsilon > 0, got {epsilon}")
    if tolerance is not None and not tolerance > 0:
        raise ValueError(f"Sinkhorn tolerance must be > 0 or None, got {tolerance}")
    problems = _Batched() if groups is None else _Grouped(groups, col_marginal.shape[0], scores.dtype)
    mass = (row_marginal > 0).unsqueeze(-1)
    column_max = problems.column_max(torch.where(mass, scores, float("-inf")))
    log_kernel = torch.where(mass, (scores - problems.to_rows(column_max)) / epsilon, 0.0)
    log_a = torch.log(row_marginal.to(log_kernel.dtype))  # −inf on padding rows
    b = col_marginal.to(log_kernel.dtype)
    log_b = torch.log(b)
    # POT starts from a uniform row scaling; padding rows start (and stay) at zero mass
    f = torch.where(row_marginal > 0, 0.0, float("-inf")).to(log_kernel.dtype)
    g = torch.zeros_like(log_b)
    solved = torch.isfinite(column_max).any(-1)  # the problems with a row of mass
    for iteration in range(iterations):
        log_columns = problems.column_logsumexp(log_kernel + f.unsqueeze(-1))  # log Σ_i exp(S_ij/ε + f_i)
        if tolerance is not None and iteration > 0:
            error = (torch.exp(log_columns + g) - b).abs().sum(-1)  # the current plan's column sums vs b
            if bool(((error <= tolerance) | ~solved).all()):
                break
        g = torch.where(solved.unsqueeze(-1), log_b - log_columns, 0.0)
        f = log_a - torch.logsumexp(log_kernel + problems.to_rows(g), dim=-1)
    return torch.exp(log_kernel + f.unsqueeze(-1) + problems.to_rows(g))


def column_marginal_error(plan: Tensor, col_marginal: Tensor) -> Tensor:
    """``‖Qᵀ1 − b‖₁`` of every problem (``plan`` …×M×J, ``col_marginal`` …×J → …): how far a
    plan whose rows are exact is from the column constraint (0 at convergence, at most 2)."""
    return (plan.sum(dim=-2) - col_marginal.to(plan.dtype)).abs().sum(dim=-1)


def hard_assignment(plan: Tensor) -> Tensor:
    """Hard label of every row, ``argmax_j Q_ij`` (Eq. ot_harden)."""
    return plan.argmax(dim=-1)


class GroupedAssignment(NamedTuple):
    """Hard OT labels of the rows, which groups had a problem to solve, and the column-marginal
    error of each group's plan."""

    labels: Tensor  # P, in [0, J) (0 on rows without mass)
    present: Tensor  # G bool: the groups with at least one row of mass
    column_error: Tensor  # G, ‖Qᵀ1 − b‖₁ of each present group's plan (0 for the others)


@float32_island
def grouped_hard_assignment(scores: Tensor, groups: Tensor, col_marginals: Tensor, *, epsilon: float,
                            iterations: int, tolerance: float | None = None,
                            mass: Tensor | None = None) -> GroupedAssignment:
    """Hard OT label in ``[0, J)`` of every row of ``scores`` (P×J), solved per group: the P_g rows
    of group ``g`` (``groups``: P integers in ``[0, G)``) against its J columns with row marginal
    1/P_g and column marginal ``col_marginals[g]`` (``col_marginals``: G×J), then ``argmax_j``
    (Eqs. entropic_ot, ot_harden). ``mass`` (P bool, default all) marks the rows that take part;
    the others get label 0 and no say. All groups are solved at once (``sinkhorn_log`` with
    ``groups``), with no host synchronisation unless ``tolerance`` is set (as in :func:`sinkhorn_log`)."""
    num_groups = col_marginals.shape[0]
    taking_part = torch.ones_like(groups, dtype=torch.bool) if mass is None else mass
    sizes = torch.zeros(num_groups, dtype=torch.long, device=groups.device).index_add(
        0, groups, taking_part.long())  # P_g (integer sums: exact and deterministic; out of place: vmap-safe)
    rows = torch.where(taking_part, 1.0 / sizes[groups].clamp_min(1).to(scores.dtype), 0.0)
    targets = col_marginals.to(scores.dtype)
    plan = sinkhorn_log(scores, rows, targets, epsilon, iterations, tolerance, groups=groups)
    present = sizes > 0
    error = (_Grouped(groups, num_groups, plan.dtype).column_sums(plan) - targets).abs().sum(-1)
    return GroupedAssignment(hard_assignment(plan), present, torch.where(present, error, 0.0))
