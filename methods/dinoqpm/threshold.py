"""DINO-QPM's similarity-penalty threshold ``τ``: the official two-phase sweep
(``find_minimum_viable_threshold`` in ``dino_qpm/sparsification/qpm/clique_utils.py``,
``RobertZimm/DINO-QPM`` @ b7509a2), re-written here on networkx graphs.

The sweep runs over the sorted entries of ``S = R + Rᵀ`` (R's diagonal zeroed). A threshold ``t``
allows the pairs with ``S_ij < t``; ``t`` is viable when the graph of allowed pairs holds a clique
of ``n_features`` features (so ``n_features`` features exist none of whose pairs is penalised).

- Index grid: ``start = ⌊F²(n−2)/(n−1)⌋`` (Turán's bound on the edges that force a clique of n),
  ``step = (F²(n−2)/(n−1) − #zero entries of S) / steps``; step ``i`` tries ``sorted(S)[start −
  int(i·step)]``.
- Phase 1 (estimate): step down from ``start``; a step whose allowed-pair count equals the last
  evaluated one is skipped; each evaluated graph's clique size is estimated with the early-stopping
  degree heuristic of Pattabiraman et al. (2015) (:func:`_estimated_clique_size`, the official
  ``large_clique_size_earlystop``). The sweep stops at the first estimate below n (the estimate is
  the step before; at the first step, the first step itself) or exactly n (this step); otherwise
  it ends at the last step.
- Phase 2 (confirmation): from that step, step back *up* (``i`` = estimate, estimate − 1, …, one
  index grid step each) until networkx's Ramsey clique removal (Boppana and Halldórsson 1992, the
  official ``approx_max_clique_early_stop``) finds n features forming a clique; that threshold is τ.

Degree ties in the heuristic are broken by the iteration order of Python sets, as in the official
code (``max`` over a set); the graphs are built with ``networkx.from_numpy_array`` as there, so the
order is the same. The official code stops with an assertion or an index error where no threshold
is viable; here that is :class:`NoViableThreshold`, raised before the program is solved.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
from networkx.algorithms.approximation.ramsey import ramsey_R2

#: thresholds tried per phase (``find_minimum_viable_threshold(..., steps=100)``)
THRESHOLD_STEPS = 100


class NoViableThreshold(ValueError):
    """No threshold of the sweep lets ``n_features`` features form a clique of unpenalised pairs."""


def _estimated_clique_size(graph: nx.Graph, target: int) -> int:
    """The size of a large clique by Pattabiraman et al.'s heuristic (Internet Math. 11, 2015), as in
    ``large_clique_size_earlystop``: from each node of degree ≥ target, grow a clique by repeatedly
    taking the candidate of highest degree (candidates: its neighbours of degree ≥ target, then
    intersected with each taken node's neighbours of degree ≥ the best size so far); return as soon
    as a clique of ≥ target nodes is grown."""
    degree = graph.degree
    best = 0
    for seed in graph:
        if degree[seed] < target:
            continue
        candidates = {node for node in graph[seed] if degree[node] >= target}
        size = 1
        while candidates:
            taken = max(candidates, key=degree)  # first of the highest degree, in set order
            candidates.remove(taken)
            candidates = candidates & {node for node in graph[taken] if degree[node] >= best}
            size += 1
        best = max(best, size)
        if best >= target:
            return best
    return best


def _has_clique(graph: nx.Graph, target: int) -> bool:
    """Whether Ramsey clique removal finds ``target`` features forming a clique of ``graph``: an
    independent set of the complement (``approx_max_clique_early_stop`` / ``clique_removal_es``:
    networkx's ``clique_removal``, stopped once a large enough set is found)."""
    remaining = nx.complement(graph)
    removed, independent = ramsey_R2(remaining)
    largest = len(independent)
    while remaining and largest < target:
        remaining.remove_nodes_from(removed)
        removed, independent = ramsey_R2(remaining)
        largest = max(largest, len(independent))
    return largest >= target


def _allowed_pairs(similarity: np.ndarray, threshold: float) -> np.ndarray:
    """F×F adjacency of the pairs ``S_ij < threshold`` (no self-loops)."""
    allowed = similarity < threshold
    np.fill_diagonal(allowed, False)
    return allowed


def penalty_threshold(r: np.ndarray, n_features: int, steps: int = THRESHOLD_STEPS) -> float:
    """``τ`` for the F×F similarity ``R`` (the program penalises the pairs ``R_ij ≥ τ``, i < j).
    ``n_features`` < 2 has no pair to penalise: ``inf``."""
    if n_features < 2:
        return float("inf")
    f = r.shape[0]
    similarity = np.array(r, dtype=np.float64)
    np.fill_diagonal(similarity, 0.0)
    similarity = similarity + similarity.T
    values = np.sort(similarity.flatten())
    turan = f ** 2 * (n_features - 2) / (n_features - 1)
    start = int(np.floor(turan))
    step = (turan - (len(values) - np.count_nonzero(similarity))) / steps

    def refuse(reason: str) -> NoViableThreshold:
        return NoViableThreshold(
            f"dinoqpm: no similarity threshold τ lets n_features = {n_features} of the F = {f} features "
            f"(feature_dim) form a set with no penalised pair ({reason}); lower n_features, raise "
            f"feature_dim, or set similarity_penalty = false")

    # phase 1: the early-stop estimate, stepping down from Turán's index
    estimate, estimate_index, last_count = None, steps - 1, 0
    for i in range(steps):
        allowed = _allowed_pairs(similarity, values[start - int(i * step)])
        count = int(allowed.sum())
        if count == last_count:
            continue
        last_count = count
        size = _estimated_clique_size(nx.from_numpy_array(allowed), n_features)
        if size < n_features:
            if i == 0:  # the official "potential fix for assertion error": confirm upwards from Turán's index
                estimate, estimate_index = 0, 0
            else:
                estimate_index = i - 1
            break
        estimate = i
        if size == n_features:
            estimate_index = i
            break
    if estimate is None:
        raise refuse("the early-stop estimate has no step to start from")
    # phase 2: step back up until networkx's clique search confirms n_features
    for i in range(steps):
        index = start - int((estimate_index - i) * step)
        if index >= len(values):
            break
        threshold = float(values[index])
        if _has_clique(nx.from_numpy_array(_allowed_pairs(similarity, threshold)), n_features):
            return threshold
    raise refuse("the clique search fails at every threshold of the sweep")
