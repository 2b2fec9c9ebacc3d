"""Log-domain Sinkhorn (methods/common/ot.py) against POT."""
from __future__ import annotations

import numpy as np
import ot
import pytest
import torch

from methods.common.ot import _Grouped, column_marginal_error, grouped_hard_assignment, hard_assignment, sinkhorn_log
from methods.vmfproto import log_vmf_normaliser


def _problem(seed: int, rows: int = 9, cols: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    scores = 0.4 * torch.randn(rows, cols, generator=g, dtype=torch.float64)
    a = torch.full((rows,), 1.0 / rows, dtype=torch.float64)
    b = torch.softmax(torch.randn(cols, generator=g, dtype=torch.float64), 0)
    return scores, a, b


@pytest.mark.parametrize("iterations", [1, 3, 10])
@pytest.mark.parametrize("epsilon", [0.05, 0.5])
def test_fixed_iterations_match_pot(iterations: int, epsilon: float) -> None:
    # POT's Sinkhorn–Knopp does one column then one row scaling per iteration, like ours
    scores, a, b = _problem(iterations)
    expected = ot.sinkhorn(a.numpy(), b.numpy(), -scores.numpy(), epsilon,
                           numItermax=iterations, stopThr=0.0, warn=False)
    plan = sinkhorn_log(scores, a, b, epsilon, iterations)
    np.testing.assert_allclose(plan.numpy(), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(plan.sum(1), a)  # the row marginal holds after every iteration


def test_converged_plan_matches_pot_log_solver() -> None:
    scores, a, b = _problem(7, rows=12, cols=5)
    a = torch.softmax(torch.randn(12, generator=torch.Generator().manual_seed(1), dtype=torch.float64), 0)
    expected = ot.bregman.sinkhorn_log(a.numpy(), b.numpy(), -scores.numpy(), 0.05,
                                       numItermax=5000, stopThr=1e-14, warn=False)
    plan = sinkhorn_log(scores, a, b, 0.05, 5000)
    np.testing.assert_allclose(plan.numpy(), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(plan.sum(0), b)


def test_padded_batch_equals_separate_solves() -> None:
    (s1, a1, b1), (s2, a2, b2) = _problem(3, rows=5), _problem(4, rows=8)
    scores = torch.zeros(2, 8, 4, dtype=torch.float64)
    scores[0, :5], scores[1] = s1, s2
    rows = torch.zeros(2, 8, dtype=torch.float64)
    rows[0, :5], rows[1] = a1, a2
    plan = sinkhorn_log(scores, rows, torch.stack([b1, b2]), 0.05, 10)
    torch.testing.assert_close(plan[0, :5], sinkhorn_log(s1, a1, b1, 0.05, 10))
    assert torch.all(plan[0, 5:] == 0)
    torch.testing.assert_close(plan[1], sinkhorn_log(s2, a2, b2, 0.05, 10))


def test_hard_labels_follow_scores_and_column_marginal() -> None:
    # rows clearly matching one column each → that column
    scores = torch.eye(3, dtype=torch.float64).repeat(2, 1)
    uniform_rows = torch.full((6,), 1 / 6, dtype=torch.float64)
    plan = sinkhorn_log(scores, uniform_rows, torch.full((3,), 1 / 3, dtype=torch.float64), 0.05, 10)
    assert hard_assignment(plan).tolist() == [0, 1, 2, 0, 1, 2]
    # every row prefers column 0, but equal column mass spreads the hard labels evenly
    # (the per-row preference for column 0 shrinks from row 0 to row 5)
    scores = torch.tensor([[1.0 - 0.1 * i, 0.0] for i in range(6)], dtype=torch.float64)
    plan = sinkhorn_log(scores, uniform_rows, torch.tensor([0.5, 0.5], dtype=torch.float64), 0.05, 10)
    assert hard_assignment(plan).tolist() == [0, 0, 0, 1, 1, 1]


def test_argument_checks() -> None:
    scores, a, b = _problem(0)
    with pytest.raises(ValueError):
        sinkhorn_log(scores, a, b, 0.05, 0)
    with pytest.raises(ValueError):
        sinkhorn_log(scores, a, b, 0.0, 3)


def test_per_column_constants_leave_the_plan_unchanged() -> None:
    # the column shift inside sinkhorn_log is exact: constants added to the columns are absorbed
    # by the column potential at every iteration (a per-row constant is not, at a fixed count)
    scores, a, b = _problem(11, rows=10, cols=4)
    offsets = torch.tensor([-1500.0, -1480.0, -1530.0, -1495.0], dtype=torch.float64)
    for iterations in (1, 10):
        expected = ot.sinkhorn(a.numpy(), b.numpy(), -scores.numpy(), 0.05, numItermax=iterations, stopThr=0.0,
                               warn=False)
        np.testing.assert_allclose(sinkhorn_log(scores + offsets, a, b, 0.05, iterations).numpy(), expected,
                                   atol=1e-9, rtol=0)
    rows = torch.linspace(-30.0, 30.0, 10, dtype=torch.float64)[:, None]
    assert not torch.allclose(sinkhorn_log(scores + rows, a, b, 0.5, 1), sinkhorn_log(scores, a, b, 0.5, 1))


def _vmf_scores(rows: int, seed: int, kappa: float) -> torch.Tensor:
    """float32 vMFProto scores ``log C_768(κ_j) + κ_j μ_jᵀ t_i`` (≈ 1.46e3 for κ from 5 to 50) of
    random unit tokens against J = 5 random means, κ_j uniform in [0.8κ, 1.2κ]."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.nn.functional.normalize(torch.randn(5, 768, generator=g), dim=-1)
    kappas = kappa * (0.8 + 0.4 * torch.rand(5, generator=g))
    tokens = torch.nn.functional.normalize(torch.randn(rows, 768, generator=g), dim=-1)
    return log_vmf_normaliser(kappas, 768) + kappas * (tokens @ mu.T)


def _unshifted_float32_labels(scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The iteration without the column shift (the code before it), kept here only to show that the
    test data is hard enough for float32 rounding to flip labels."""
    log_kernel, f, g = scores / 0.05, torch.zeros_like(a), torch.zeros_like(b)
    for _ in range(10):
        g = b.log() - torch.logsumexp(log_kernel + f[:, None], dim=0)
        f = a.log() - torch.logsumexp(log_kernel + g[None], dim=1)
    return (log_kernel + f[:, None] + g[None]).argmax(1)


def test_float32_hard_labels_match_a_float64_plan() -> None:
    # κ ≈ 5 (stage 1's value): the per-patch score differences are small, so near-ties are common
    scores = _vmf_scores(20_000, 0, 5.0)
    assert float(scores.abs().min()) > 1000  # the regime of D = 768
    a = torch.full((len(scores),), 1.0 / len(scores))
    b = torch.softmax(torch.randn(5, generator=torch.Generator().manual_seed(1)), 0)
    # oracle: POT's log-domain Sinkhorn (same iteration: columns, then rows, from zero potentials)
    # in float64 on the same float32 scores
    reference = ot.bregman.sinkhorn_log(a.double().numpy(), b.double().numpy(), -scores.double().numpy(), 0.05,
                                        numItermax=10, stopThr=0.0, warn=False)
    expected = torch.from_numpy(reference.argmax(1))
    labels = hard_assignment(sinkhorn_log(scores, a, b, 0.05, 10))
    assert int((labels != expected).sum()) == 0
    assert int((_unshifted_float32_labels(scores, a, b) != expected).sum()) > 0


def test_tolerance_runs_to_the_column_marginal() -> None:
    scores = _vmf_scores(500, 2, 50.0).double()
    a = torch.full((500,), 1.0 / 500, dtype=torch.float64)
    b = torch.full((5,), 0.2, dtype=torch.float64)
    few = sinkhorn_log(scores, a, b, 0.05, 10)
    assert float(column_marginal_error(few, b)) > 0.1  # 10 iterations are far from converged at κ ≈ 50
    plan = sinkhorn_log(scores, a, b, 0.05, 100_000, tolerance=1e-6)
    assert float(column_marginal_error(plan, b)) <= 1e-6
    expected = ot.bregman.sinkhorn_log(a.numpy(), b.numpy(), -scores.numpy(), 0.05, numItermax=100_000,
                                       stopThr=1e-10, warn=False)
    np.testing.assert_allclose(plan.numpy(), expected, atol=1e-6, rtol=0)
    capped = sinkhorn_log(scores, a, b, 0.05, 10, tolerance=1e-6)  # the cap wins
    torch.testing.assert_close(capped, few)
    with pytest.raises(ValueError):
        sinkhorn_log(scores, a, b, 0.05, 10, tolerance=0.0)


def test_grouped_assignment_reports_each_groups_column_error() -> None:
    (s1, _, b1), (s2, _, b2) = _problem(5, rows=6), _problem(6, rows=9)
    scores, groups = torch.cat([s1, s2]), torch.tensor([4] * 6 + [1] * 9)
    marginals = torch.zeros(5, 4, dtype=torch.float64)
    marginals[4], marginals[1] = b1, b2
    solved = grouped_hard_assignment(scores, groups, marginals, epsilon=0.05, iterations=3)
    assert solved.present.tolist() == [False, True, False, False, True]
    assert solved.column_error[~solved.present].tolist() == [0.0, 0.0, 0.0]
    for group, (s, b) in ((1, (s2, b2)), (4, (s1, b1))):
        plan = sinkhorn_log(s, torch.full((len(s),), 1.0 / len(s), dtype=torch.float64), b, 0.05, 3)
        assert float(solved.column_error[group]) == pytest.approx(float((plan.sum(0) - b).abs().sum()))


def _padded_batch(scores: torch.Tensor, groups: torch.Tensor, mass: torch.Tensor, marginals: torch.Tensor,
                  iterations: int, tolerance: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle, the computation before the grouped form: each present group's rows with mass
    cut out by a loop, zero-padded into one batch for sinkhorn_log (padding checked above to
    equal separate solves; one stopping test for the batch), labels put back, 0 elsewhere."""
    present = [group for group in range(len(marginals)) if bool(((groups == group) & mass).any())]
    members = [torch.nonzero((groups == group) & mass).squeeze(-1) for group in present]
    longest = max(len(m) for m in members)
    padded = torch.zeros(len(present), longest, scores.shape[1], dtype=scores.dtype)
    rows = torch.zeros(len(present), longest, dtype=scores.dtype)
    for slot, m in enumerate(members):
        padded[slot, : len(m)], rows[slot, : len(m)] = scores[m], 1.0 / len(m)
    plan = sinkhorn_log(padded, rows, marginals[present], 0.05, iterations, tolerance)
    labels, errors = torch.zeros(len(scores), dtype=torch.long), torch.zeros(len(marginals), dtype=scores.dtype)
    for slot, (group, m) in enumerate(zip(present, members)):
        labels[m] = hard_assignment(plan[slot, : len(m)])
        errors[group] = column_marginal_error(plan[slot], marginals[group])
    return labels, errors


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", range(6))
def test_grouped_assignment_equals_solving_each_group_alone(seed: int, dtype: torch.dtype) -> None:
    """Random cases with groups absent from the batch, one-row groups, rows without mass and
    tied scores, with a fixed count and with a tolerance: the unpadded, sync-free grouped solve
    gives the plans of the zero-padded batch it replaces."""
    g = torch.Generator().manual_seed(seed)
    rows, columns, num_groups = 40, 4, 7
    scores = (0.4 * torch.randn(rows, columns, generator=g, dtype=torch.float64)).to(dtype)
    scores[::5] = scores[::5, :1]  # ties: every column of these rows equal
    scores[1] = scores[2]  # two identical rows
    groups = torch.randint(0, 5, (rows,), generator=g)  # groups 5, 6 absent
    groups[-1] = 5 if seed % 2 else 0
    groups[groups == 5] = 5  # with an odd seed group 5 has exactly one row
    mass = torch.rand(rows, generator=g) > 0.25
    mass[-1] = True
    marginals = torch.softmax(torch.randn(num_groups, columns, generator=g, dtype=torch.float64), -1).to(dtype)
    tolerance = 1e-3 if seed >= 4 else None
    iterations = 200 if tolerance else 10
    solved = grouped_hard_assignment(scores, groups, marginals, epsilon=0.05, iterations=iterations,
                                     tolerance=tolerance, mass=mass)
    labels, errors = _padded_batch(scores, groups, mass, marginals, iterations, tolerance)
    expected_present = torch.zeros(num_groups, dtype=torch.bool).index_fill_(0, groups[mass], True)
    assert torch.equal(solved.present, expected_present)
    assert torch.equal(solved.labels, labels)
    torch.testing.assert_close(solved.column_error, errors, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("by_matmul", [True, False])  # CUDA's one-hot matmul, the CPU's index_add_
def test_both_ways_of_summing_a_groups_rows_equal_a_loop(by_matmul: bool) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.rand(30, 4, generator=g, dtype=torch.float64)
    groups = torch.randint(0, 6, (30,), generator=g)
    groups[groups == 2] = 3  # group 2 absent: sums 0
    sums = _Grouped(groups, 6, x.dtype, by_matmul=by_matmul).column_sums(x)
    expected = torch.stack([x[groups == k].sum(0) for k in range(6)])
    torch.testing.assert_close(sums, expected, rtol=1e-12, atol=1e-12)
