"""DINO-QPM's similarity threshold τ against the official ``find_minimum_viable_threshold`` run
verbatim (tests/helpers/dinoqpm_clique_official.py, ``RobertZimm/DINO-QPM`` @ b7509a2): equal τ and
equal penalised pairs on 20 random programs of 16–256 features and on the issue's 64/128/256-feature
programs; a program with no viable τ is refused before the solve, naming n_features."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from dinoqpm_clique_official import find_minimum_viable_threshold, get_disallowed_vector_connections
from methods.dinoqpm.assignment import penalised_pairs, qpm_constants, solve_assignment
from methods.dinoqpm.threshold import NoViableThreshold, penalty_threshold


def random_program(seed: int, features: int, classes: int) -> np.ndarray:
    """``R`` as ``qpm_constants`` makes it, from random class-structured features."""
    rng = np.random.default_rng(seed)
    labels = np.arange(8 * classes) % classes
    x = np.maximum(rng.normal(size=(classes, features)), 0)[labels] + 0.5 * rng.normal(size=(len(labels), features))
    return qpm_constants(x, labels, classes)[1]


def official(r: np.ndarray, n_features: int) -> tuple[float, np.ndarray]:
    """τ and the penalised pairs as ``qpm_solving.solve_qp`` gets them (R's diagonal zeroed in place
    first, then the sweep, then ``get_disallowed_vector_connections``), the printing silenced."""
    mat_r = np.array(r, dtype=np.float64)
    mat_r[np.eye(mat_r.shape[0], dtype=bool)] = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        tau = find_minimum_viable_threshold(mat_r, n_features)[0]
    disallowed = get_disallowed_vector_connections(mat_r, tau)
    pairs = [(int(i), int(j)) for i, js in sorted(disallowed.items()) for j in js]
    return float(tau), np.array(pairs, dtype=np.int64).reshape(-1, 2)


def _programs() -> list[tuple[int, int, int, int]]:
    """(seed, F, classes, n_features): 20 random sizes in 16–256, n_features 4 … F/3."""
    rng = np.random.default_rng(55)
    out = []
    for seed in range(20):
        features = int(rng.integers(16, 257))
        out.append((seed, features, int(rng.integers(5, 41)), int(rng.integers(4, max(5, features // 3) + 1))))
    return out


@pytest.mark.parametrize("seed, features, classes, n_features", _programs())
def test_threshold_and_penalised_pairs_equal_the_official_sweep(seed, features, classes, n_features) -> None:
    r = random_program(seed, features, classes)
    tau, pairs = official(r, n_features)
    assert penalty_threshold(r, n_features) == tau
    assert np.array_equal(penalised_pairs(r, tau), pairs)


@pytest.mark.parametrize("features, n_features", [(64, 16), (128, 32), (256, 50)])
def test_the_issue_sizes_equal_the_official_sweep(features, n_features) -> None:
    r = random_program(features, features, 50)
    tau, pairs = official(r, n_features)
    assert penalty_threshold(r, n_features) == tau
    assert np.array_equal(penalised_pairs(r, tau), pairs)


def test_no_viable_threshold_is_refused_before_the_solve_naming_n_features() -> None:
    """Every feature identical but one pair: n_features = F needs every pair allowed, but the pair at
    the largest similarity never is (``S < τ`` is strict), so no τ of the sweep is viable."""
    r = np.ones((6, 6))
    r[0, 1] = r[1, 0] = 0.5
    with pytest.raises(NoViableThreshold, match=r"n_features = 6 of the F = 6 features"):
        penalty_threshold(r, 6)
    with pytest.raises(NoViableThreshold, match="n_features = 6"):
        solve_assignment(np.eye(6)[:, :3] + 0.1, r, n_features=6, n_per_class=2)
