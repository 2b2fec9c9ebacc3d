"""Log-domain Sinkhorn (methods/common/ot.py) against POT."""
from __future__ import annotations

import numpy as np
import ot
import pytest
import torch

from methods.common.ot import hard_assignment, sinkhorn_log


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
