"""DINO-QPM against re-statements of its official code (``RobertZimm/DINO-QPM`` @ b7509a2,
tests/helpers/dinoqpm_oracle.py): the QP's constants, its optimum (HiGHS against brute-force
enumeration and, where gurobipy's size-limited licence installs, Gurobi), the head's logits, maps and
feature vector (dense and sparse), the feature diversity loss; bad programs refused before compute."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from dinoqpm_oracle import brute_force_assignment, gurobi_assignment, official_a_r, official_fdl, official_forward
from methods.base import Stage
from methods.dinoqpm.assignment import penalty_threshold, qpm_constants, solve_assignment
from methods.dinoqpm.losses import feature_diversity_loss
from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData

J = 3
SMALL = dict(feature_dim=12, hidden_dim=16, layers=3, n_features=6)


def random_program(seed: int, features: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``A`` and ``R`` as ``qpm_constants`` makes them, from random class-structured features."""
    rng = np.random.default_rng(seed)
    labels = np.arange(12 * classes) % classes
    x = np.maximum(rng.normal(size=(classes, features)), 0)[labels] + 0.3 * rng.normal(size=(len(labels), features))
    return qpm_constants(x, labels, classes)


def edges_of(solution, features: int, classes: int) -> np.ndarray:
    edges = np.zeros((features, classes), dtype=bool)
    edges[solution.selected] = solution.weight.T > 0
    return edges


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("penalised", [False, True])
def test_highs_reaches_the_brute_force_optimum(seed: int, penalised: bool) -> None:
    """Equal objective, and HiGHS' assignment is one of the optimal ones (ties allowed)."""
    a, r = random_program(seed, features=6, classes=3)
    threshold = penalty_threshold(r, 4) if penalised else 0.0
    solution = solve_assignment(a, r if penalised else None, n_features=4, n_per_class=2,
                                threshold=threshold, mip_gap=0.0)
    best, optima = brute_force_assignment(a, r if penalised else None, threshold, 4, 2)
    assert abs(solution.objective - best) < 1e-9
    edges = edges_of(solution, 6, 3)
    assert any(tuple(solution.selected) == subset and np.array_equal(edges, e) for subset, e in optima)
    assert (edges.sum(axis=0) == 2).all() and len({edges[:, c].tobytes() for c in range(3)}) == 3


def test_duplicate_classes_are_cut_until_every_class_has_its_own_features() -> None:
    """Two identical classes would take the same best pair: the de-duplication cut separates them,
    at the brute-force optimum."""
    a = np.array([[1.0, 1.0, -0.2], [0.9, 0.9, 0.1], [0.1, 0.1, 0.8], [-0.3, -0.3, 0.7]])
    solution = solve_assignment(a, None, n_features=3, n_per_class=2, mip_gap=0.0)
    best, _ = brute_force_assignment(a, None, 0.0, 3, 2)
    assert solution.cuts >= 1 and abs(solution.objective - best) < 1e-9
    edges = edges_of(solution, 4, 3)
    assert not np.array_equal(edges[:, 0], edges[:, 1])


@pytest.mark.parametrize("features, classes, n_features, n_per_class", [(10, 4, 6, 2), (12, 5, 6, 3), (14, 6, 7, 3)])
def test_highs_equals_gurobi_on_the_official_model(features, classes, n_features, n_per_class) -> None:
    pytest.importorskip("gurobipy", reason="gurobipy (optional oracle) is not installed")
    a, r = random_program(features + classes, features, classes)
    threshold = penalty_threshold(r, n_features)
    solution = solve_assignment(a, r, n_features=n_features, n_per_class=n_per_class, threshold=threshold,
                                mip_gap=0.0)
    objective, selected, edges = gurobi_assignment(a, r, threshold, n_features, n_per_class)
    assert abs(solution.objective - objective) < 1e-6
    assert np.array_equal(np.flatnonzero(selected), solution.selected)


def test_constants_equal_compute_a_and_compute_r() -> None:
    rng = np.random.default_rng(0)
    labels = np.arange(60) % 5
    x = rng.gamma(2.0, size=(60, 9)) + np.eye(5)[labels] @ rng.normal(size=(5, 9))
    a, r = qpm_constants(x, labels, 5)
    a_ref, r_ref = official_a_r(x, labels)
    assert np.abs(a - a_ref).max() < 1e-12
    assert np.abs(r - r_ref).max() < 1e-12


def dinoqpm(source: SyntheticTokens, seed: int = 0, **overrides) -> nn.Module:
    torch.manual_seed(seed)
    return build_method("dinoqpm", source.context(J, seed=seed), **{**SMALL, **overrides})


def official_parts(method, source: SyntheticTokens, rows: torch.Tensor):
    """The adapter's MLP and linear layer in the official order, on the official inputs: the
    final-norm patch tokens and the final-norm CLS token (SyntheticTokens' norm: affine-free LayerNorm)."""
    normed = nn.functional.layer_norm(source.block_input[rows].float(), (source.dim,))
    official_mlp = nn.Sequential(*[layer.bn if hasattr(layer, "bn") else layer for layer in copy.deepcopy(method.mlp)])
    return normed[:, source.context(J).num_prefix_tokens:], normed[:, 0], official_mlp


def test_dense_head_equals_dino2div_with_final_layer() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    method = dinoqpm(source).eval()
    rows = torch.arange(len(source))
    tokens, cls, mlp = official_parts(method, source, rows)
    logits, maps, vector = official_forward(tokens, cls, mlp.eval(), method.linear)
    batch = source.batch(rows)
    with torch.no_grad():
        ours_maps, ours_vector = method.feature_maps(batch)
        assert (method.logits(batch) - logits).abs().max() < 1e-5
    assert (ours_maps - maps).abs().max() < 1e-5 and (ours_vector - vector).abs().max() < 1e-5


def test_sparse_head_equals_slddlevel_after_the_program() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    method = dinoqpm(source)
    method.on_stage_start(Stage("finetune", 1), 0, SyntheticTrainData(source))
    method.eval()
    assert bool(method.assigned) and (method.sparse_weight.sum(dim=1) == J).all()
    rows = torch.arange(len(source))
    tokens, cls, mlp = official_parts(method, source, rows)
    sparse = nn.Linear(SMALL["n_features"], source.num_classes, bias=False)
    sparse.weight = nn.Parameter(method.sparse_weight.clone(), requires_grad=False)
    selection = method.selection.numpy()
    # the official mean and std: calculate_metadata over the dense features of the training split
    _, _, dense_vector = official_forward(tokens, cls, mlp.eval(), method.linear)
    # the assignment: the official constants of the dense features, the same program
    a, r = official_a_r(dense_vector.detach().double().numpy(), source.labels.numpy())
    expected_solution = solve_assignment(a, r, n_features=SMALL["n_features"], n_per_class=J)
    assert np.array_equal(method.selection.numpy(), expected_solution.selected)
    assert np.array_equal(method.sparse_weight.numpy(), expected_solution.weight)
    mean, std = dense_vector.mean(dim=0)[selection], dense_vector.std(dim=0, unbiased=False)[selection]
    logits, maps, vector = official_forward(tokens, cls, mlp, sparse, selection, mean, std)
    batch = source.batch(rows)
    with torch.no_grad():
        assert (method.logits(batch) - logits).abs().max() < 1e-4
        contributions = method.prototype_contributions(batch, batch.labels)
        assert (contributions.sum(dim=1) - logits.gather(1, batch.labels[:, None])[:, 0]).abs().max() < 1e-4
        class_maps = method.activation_maps(batch, batch.labels)
        assigned = method.sparse_weight[batch.labels] > 0
        expected = torch.stack([maps[b][assigned[b]] for b in range(len(rows))])
        assert (class_maps - expected).abs().max() < 1e-6
        assert (method.global_features(batch) - vector).abs().max() < 1e-6
    qp = method.diagnostics({})["qp"]
    assert 0.0 <= qp["mip_gap"] <= method.diagnostic_ranges()["qp.mip_gap"][1] and qp["dedup_cuts"] >= 0


def test_finetune_loss_is_the_official_composition() -> None:
    """``train.py`` in fine-tuning: CE on the SLDD logits + fdl · FDL(selected maps, feat_vec =
    final_features) + l1_fm · mean|selected maps| + l1_fv · mean|final_features| (dropout 0)."""
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    method = dinoqpm(source)
    method.on_stage_start(Stage("finetune", 1), 0, SyntheticTrainData(source))
    method.train()
    rows = torch.arange(len(source))
    batch = source.batch(rows)
    terms = method.loss_terms(batch, Stage("finetune", 1), 0)
    ours = sum(method.loss_weights[name] * value for name, value in terms.items())
    tokens, cls, mlp = official_parts(method, source, rows)
    sparse = nn.Linear(SMALL["n_features"], source.num_classes, bias=False)
    sparse.weight = nn.Parameter(method.sparse_weight.clone(), requires_grad=False)
    logits, maps, vector = official_forward(tokens, cls, mlp.train(), sparse, method.selection.numpy(),
                                            method.feature_mean, method.feature_std)
    expected = (nn.functional.cross_entropy(logits, batch.labels)
                + official_fdl(maps, logits, sparse.weight, vector, 1.0)
                + 5.0 * maps.abs().mean() + 1.0 * vector.abs().mean())
    assert (ours - expected).abs().max() < 1e-5


def test_feature_diversity_loss_equals_the_official_one() -> None:
    g = torch.Generator().manual_seed(0)
    maps = torch.randn(5, 8, 4, 4, generator=g).relu()
    vector = maps.mean(dim=(2, 3))
    weight = torch.randn(3, 8, generator=g)
    logits = torch.randn(5, 3, generator=g)
    ours = 0.5 * feature_diversity_loss(maps, logits, weight, vector)
    assert (ours - official_fdl(maps, logits, weight, vector, 0.5)).abs().max() < 1e-6


@pytest.mark.parametrize("overrides, message", [
    ({"n_features": 2}, "infeasible: each class takes n_per_class = 3 (prototypes_per_class) of only n_features = 2"),
    ({"n_features": 3}, "4 classes need distinct sets of n_per_class = 3 of n_features = 3 features"),
    ({"n_features": 20}, "n_features = 20 exceeds the 12 features"),
    ({"time_limit": 0.0}, "time_limit"),
    ({"time_limit": -5.0}, "time_limit"),
    ({"solver": "gurobi"}, "solver"),
])
def test_bad_programs_are_refused_before_compute_naming_the_hyperparameter(overrides, message) -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    with pytest.raises(ValueError) as err:
        dinoqpm(source, **overrides)
    assert message in str(err.value)
    with pytest.raises(ValueError):  # the solver refuses the same program on its own
        solve_assignment(np.zeros((12, 4)), None, n_features=overrides.get("n_features", 6), n_per_class=J,
                         time_limit=overrides.get("time_limit", 1.0), solver=overrides.get("solver", "highs"))
