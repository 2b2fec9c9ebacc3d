"""DINO-QPM's feature selection and class assignment: QPM's quadratic program (Norrenbrock et al.,
"QPM: Discrete Optimization for Globally Interpretable Image Classification", ICLR 2025; DINO-QPM,
Zimmermann, Norrenbrock and Rosenhahn, CVPR 2026; official code ``RobertZimm/DINO-QPM`` @ b7509a2,
``dino_qpm/sparsification``), solved with HiGHS (``scipy.optimize.milp``) instead of Gurobi.

Constants (``qpm_constants``): ``A`` (F×C) the Pearson correlation of each dense feature with each
class's one-hot label over the training images, divided by its largest magnitude
(``compute_A.corr_matrix``; ``a_matrix / abs(a_matrix).max()``); ``R`` (F×F) the cosine similarity
of the rows of ``A``, divided by its largest magnitude (``compute_R``).

Program (``qpm_solving.solve_qp``, the state its iterations end in): binary ``s`` (F features) and
``e`` (F×C edges, ``e = W ∘ s``), maximise

    1000 / (n_per_class · C) · Σ A ∘ e  −  Σ_{i<j, R_ij ≥ τ} R̃_ij s_i s_j

subject to ``Σ s = n_features``, ``Σ_i e_ic = n_per_class`` for every class (``ClassSparsity``'s
end state: total ≤ C·n_per_class and each class ≥ n_per_class), ``e_ic ≤ s_i``, and no two classes
with the same feature set (``DeDuplipication``). ``R̃ = (R − min R_{≠0}) / max(...)`` with the
diagonal zeroed; ``τ`` is the penalty threshold (the official two-phase sweep,
:func:`.threshold.penalty_threshold`). The official code adds its class-sparsity and
de-duplication constraints lazily; here the sparsity constraints are exact from the start and
de-duplication is a lazy cut loop (each cut forbids the one shared feature set of a duplicated
pair), so the loop ends at an optimum of the whole program. ``s_i s_j`` is
linearised by ``y_ij ≥ s_i + s_j − 1, y_ij ≥ 0`` (its coefficient in the maximised objective is
negative, so ``y_ij = s_i s_j`` at an optimum).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from .threshold import penalty_threshold

#: the open solvers the program is handed to (HiGHS through ``scipy.optimize.milp``)
SOLVERS = ("highs",)
#: ``z_a_scaling = 1000 / (n_features_per_class * n_classes)`` (qpm_solving.py)
OBJECTIVE_SCALE = 1000.0


@dataclass(frozen=True)
class Assignment:
    """The program's solution: ``selected`` the sorted indices of the chosen features (n_features),
    ``weight`` the C×n_features 0/1 assignment over them (the sparse final layer), ``objective``
    its value, ``gap`` the solver's relative MIP gap, ``cuts`` the de-duplication cuts added."""

    selected: np.ndarray
    weight: np.ndarray
    objective: float
    gap: float
    cuts: int


def check_program(*, num_features: int, num_classes: int, n_features: int, n_per_class: int,
                  solver: str, time_limit: float, mip_gap: float, method: str = "dinoqpm") -> None:
    """Refuse a program that cannot be solved, before any compute, naming the hyperparameter."""
    if solver not in SOLVERS:
        raise ValueError(f"{method}: solver must be one of {', '.join(map(repr, SOLVERS))} (HiGHS via "
                         f"scipy.optimize.milp), got {solver!r}")
    if not (isinstance(time_limit, (int, float)) and not isinstance(time_limit, bool)
            and math.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"{method}: time_limit must be a finite number of seconds > 0, got {time_limit!r}")
    if not (isinstance(mip_gap, (int, float)) and not isinstance(mip_gap, bool) and 0 <= mip_gap < 1):
        raise ValueError(f"{method}: mip_gap must be a number in [0, 1), got {mip_gap!r}")
    if n_features > num_features:
        raise ValueError(f"{method}: n_features = {n_features} exceeds the {num_features} features of the MLP "
                         f"(feature_dim); lower n_features or raise feature_dim")
    if n_per_class > n_features:
        raise ValueError(f"{method}: the program is infeasible: each class takes n_per_class = {n_per_class} "
                         f"(prototypes_per_class) of only n_features = {n_features} features; raise n_features "
                         f"or lower prototypes_per_class")
    if math.comb(n_features, n_per_class) < num_classes:
        raise ValueError(f"{method}: the program is infeasible: {num_classes} classes need distinct sets of "
                         f"n_per_class = {n_per_class} of n_features = {n_features} features, but only "
                         f"C({n_features}, {n_per_class}) = {math.comb(n_features, n_per_class)} exist; "
                         f"raise n_features")


def feature_class_correlation(features: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """F×C Pearson correlation of every feature with every class indicator (``compute_A.corr_matrix``:
    ``(1/n) Σ (f − f̄)(y − ȳ) / max(std(f)·std(y), 1e-10)``, population standard deviations)."""
    x = np.asarray(features, dtype=np.float64)
    centred = x - x.mean(axis=0)
    indicator = (np.asarray(labels)[:, None] == np.arange(num_classes)[None, :]).astype(np.float64)
    y_centred = indicator - indicator.mean(axis=0)
    numerator = centred.T @ y_centred / x.shape[0]
    denominator = np.clip(centred.std(axis=0)[:, None] * y_centred.std(axis=0)[None, :], 1e-10, None)
    return numerator / denominator


def qpm_constants(features: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``A`` and ``R`` (qpm_sparsification.py: each divided by its largest magnitude)."""
    a = feature_class_correlation(features, labels, num_classes)
    a = a / np.abs(a).max()
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    unit = a / np.clip(norms, 1e-8, None)  # Correlation.sim_matrix: a_n = a / max(‖a‖, eps), eps 1e-8
    r = unit @ unit.T
    return a, r / np.abs(r).max()


def scaled_similarity(r: np.ndarray) -> np.ndarray:
    """``R̃``: the diagonal zeroed, ``(R − min of the non-zero entries) / max`` (qpm_solving.py)."""
    r = np.array(r, dtype=np.float64)
    np.fill_diagonal(r, 0.0)
    shifted = r - r[r != 0].min()
    return shifted / shifted.max()


def penalised_pairs(r: np.ndarray, threshold: float) -> np.ndarray:
    """(P, 2) pairs ``i < j`` with ``R_ij ≥ τ``, row-major (``get_disallowed_vector_connections``: R's
    diagonal zeroed, compared with ``τ`` itself although the sweep ran on ``R + Rᵀ``)."""
    raw = np.array(r, dtype=np.float64)
    np.fill_diagonal(raw, 0.0)
    return np.argwhere(np.triu(raw >= threshold, k=1))


def _dedup_cut(num_c: int, first: int, second: int, shared: np.ndarray, n_per_class: int, offset: int,
               width: int) -> LinearConstraint:
    """``Σ_{i∈S} e_i,first + e_i,second ≤ 2·n_per_class − 1``: the two classes may not both take ``S``."""
    row = np.zeros(width)
    for cls in (first, second):
        row[offset + shared * num_c + cls] = 1.0
    return LinearConstraint(row[None, :], -np.inf, 2 * n_per_class - 1)


def solve_assignment(a: np.ndarray, r: np.ndarray | None, *, n_features: int, n_per_class: int,
                     threshold: float | None = None, mip_gap: float = 5e-3, time_limit: float = 10800.0,
                     solver: str = "highs") -> Assignment:
    """Solve the program above for ``A`` (F×C) and ``R`` (F×F, None: no similarity penalty, the
    official ``no_r``); ``threshold`` ``τ`` (None: :func:`penalty_threshold`)."""
    a = np.asarray(a, dtype=np.float64)
    num_f, num_c = a.shape
    check_program(num_features=num_f, num_classes=num_c, n_features=n_features, n_per_class=n_per_class,
                  solver=solver, time_limit=time_limit, mip_gap=mip_gap)
    pairs = np.empty((0, 2), dtype=np.int64)
    pair_cost = np.empty(0)
    if r is not None:
        tau = penalty_threshold(r, n_features) if threshold is None else threshold
        pairs = penalised_pairs(r, tau)
        pair_cost = scaled_similarity(r)[pairs[:, 0], pairs[:, 1]]
    # variables: s (F) | e (F·C, row-major: e[i, c] at F + i·C + c) | y (pairs)
    num_e, num_y = num_f * num_c, len(pairs)
    width = num_f + num_e + num_y
    scale = OBJECTIVE_SCALE / (n_per_class * num_c)
    cost = np.concatenate([np.zeros(num_f), -scale * a.ravel(), pair_cost])  # milp minimises
    rows = []
    rows.append(LinearConstraint(sparse.csr_array((np.ones(num_f), (np.zeros(num_f, dtype=int), np.arange(num_f))),
                                                  shape=(1, width)), n_features, n_features))
    class_rows = sparse.csr_array((np.ones(num_e), (np.tile(np.arange(num_c), num_f), num_f + np.arange(num_e))),
                                  shape=(num_c, width))
    rows.append(LinearConstraint(class_rows, n_per_class, n_per_class))
    edge = np.arange(num_e)
    link = sparse.csr_array((np.concatenate([np.ones(num_e), -np.ones(num_e)]),
                             (np.concatenate([edge, edge]), np.concatenate([num_f + edge, edge // num_c]))),
                            shape=(num_e, width))
    rows.append(LinearConstraint(link, -np.inf, 0.0))  # e_ic − s_i ≤ 0
    if num_y:
        k = np.arange(num_y)
        product = sparse.csr_array((np.concatenate([np.ones(num_y), np.ones(num_y), -np.ones(num_y)]),
                                    (np.concatenate([k, k, k]),
                                     np.concatenate([pairs[:, 0], pairs[:, 1], num_f + num_e + k]))),
                                   shape=(num_y, width))
        rows.append(LinearConstraint(product, -np.inf, 1.0))  # s_i + s_j − y_ij ≤ 1
    integrality = np.concatenate([np.ones(num_f + num_e), np.zeros(num_y)])
    bounds = Bounds(np.zeros(width), np.ones(width))
    cuts = 0
    while True:
        result = milp(cost, constraints=rows, integrality=integrality, bounds=bounds,
                      options={"time_limit": float(time_limit), "mip_rel_gap": float(mip_gap)})
        if result.x is None:
            raise RuntimeError(f"dinoqpm: HiGHS found no assignment within time_limit = {time_limit} s "
                               f"({result.message}); raise time_limit")
        s = result.x[:num_f] > 0.5
        e = result.x[num_f:num_f + num_e].reshape(num_f, num_c) > 0.5
        duplicates = _duplicate_pairs(e)
        if not duplicates:
            break
        for first, second in duplicates:
            shared = np.flatnonzero(e[:, first])
            rows.append(_dedup_cut(num_c, first, second, shared, n_per_class, num_f, width))
            cuts += 1
    selected = np.flatnonzero(s)
    objective = -float(cost[:num_f + num_e] @ np.concatenate([s, e.ravel()]).astype(np.float64))
    if num_y:
        both = s[pairs[:, 0]] & s[pairs[:, 1]]
        objective -= float(pair_cost[both].sum())
    gap = float(getattr(result, "mip_gap", 0.0) or 0.0)
    return Assignment(selected=selected, weight=e[selected].T.astype(np.float32), objective=objective,
                      gap=gap, cuts=cuts)


def program_objective(a: np.ndarray, r: np.ndarray | None, threshold: float, selected: np.ndarray,
                      edges: np.ndarray, n_per_class: int) -> float:
    """The objective of a given solution (``edges``: F×C 0/1 over all features)."""
    num_c = a.shape[1]
    value = OBJECTIVE_SCALE / (n_per_class * num_c) * float((np.asarray(a, dtype=np.float64) * edges).sum())
    if r is not None:
        chosen = np.zeros(a.shape[0], dtype=bool)
        chosen[selected] = True
        pairs = penalised_pairs(r, threshold)
        both = chosen[pairs[:, 0]] & chosen[pairs[:, 1]]
        value -= float(scaled_similarity(r)[pairs[both, 0], pairs[both, 1]].sum())
    return value


def _duplicate_pairs(edges: np.ndarray) -> list[tuple[int, int]]:
    """Class pairs with the same feature set (``deduplication.get_duplicates``)."""
    seen: dict[bytes, int] = {}
    pairs = []
    for cls in range(edges.shape[1]):
        key = np.packbits(edges[:, cls]).tobytes()
        if key in seen:
            pairs.append((seen[key], cls))
        else:
            seen[key] = cls
    return pairs
