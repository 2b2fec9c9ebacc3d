"""Independent re-statements of DINO-QPM's official computations (``RobertZimm/DINO-QPM`` @ b7509a2),
the oracles of tests/methods/test_dinoqpm.py and tests/metrics/test_global_interpretability.py.

Each follows the official code line by line in its own library (torch / sklearn / ``statistics``),
never calling the suite's implementation: the QP by brute-force enumeration, the metrics as
``ClassIndependence.compute_real_gt_max``, ``Contrastiveness.gmm_overlap_per_feature`` and
``diversity.MultiKCrossChannelMaxPooledSum`` compute them, the head as ``Dino2Div`` +
``FinalLayer`` / ``SLDDLevel`` + ``FeatureDiversityLoss``.
"""
from __future__ import annotations

import itertools
from statistics import NormalDist

import numpy as np
import torch
from sklearn.mixture import GaussianMixture


# ---- the program, by enumeration ----------------------------------------------------------------
def brute_force_assignment(a: np.ndarray, r: np.ndarray | None, threshold: float, n_features: int,
                           n_per_class: int) -> tuple[float, list[tuple[tuple[int, ...], np.ndarray]]]:
    """Best objective of the QPM program and every optimal (selection, F×C edges) solution, by trying
    every feature subset and every per-class choice of n_per_class of its features (duplicates refused)."""
    num_f, num_c = a.shape
    scale = 1000.0 / (n_per_class * num_c)
    if r is not None:
        raw = np.array(r, dtype=np.float64)
        np.fill_diagonal(raw, 0.0)
        shifted = raw - raw[raw != 0].min()
        scaled = shifted / shifted.max()
    best, solutions = -np.inf, []
    for subset in itertools.combinations(range(num_f), n_features):
        penalty = 0.0
        if r is not None:
            for i, j in itertools.combinations(subset, 2):
                if raw[i, j] >= threshold:
                    penalty += scaled[i, j]
        choices = list(itertools.combinations(subset, n_per_class))
        for per_class in itertools.product(choices, repeat=num_c):
            if len(set(per_class)) < num_c:
                continue
            value = scale * sum(a[list(cols), c].sum() for c, cols in enumerate(per_class)) - penalty
            if value > best + 1e-9:
                best, solutions = value, []
            if value >= best - 1e-9:
                edges = np.zeros((num_f, num_c), dtype=bool)
                for c, cols in enumerate(per_class):
                    edges[list(cols), c] = True
                solutions.append((subset, edges))
    return best, solutions


def official_a_r(features: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``compute_A.corr_matrix`` (per-class loop, numpy) and ``compute_R`` (torch ``sim_matrix``)."""
    n_samples, n_features = features.shape
    n_classes = labels.max() + 1
    corr = np.zeros((n_features, n_classes))
    for class_idx in range(n_classes):
        class_labels = labels == class_idx
        zero_mean_labels = class_labels - class_labels.mean()
        zero_mean_features = features - features.mean(axis=0)
        numerator = (1 / zero_mean_labels.shape[0]) * (zero_mean_features.T @ zero_mean_labels)
        denominator = np.clip(zero_mean_features.std(axis=0) * zero_mean_labels.std(), a_min=1e-10, a_max=None)
        corr[:, class_idx] = numerator / denominator
    a = corr / np.abs(corr).max()
    t = torch.tensor(a)
    norms = t.norm(dim=1)[:, None]
    unit = t / torch.max(norms, 1e-8 * torch.ones_like(norms))
    r = unit @ unit.T
    return a, (r / r.abs().max()).numpy()


# ---- the metrics ---------------------------------------------------------------------------------
def official_class_independence(features: torch.Tensor, num_classes: int, labels: torch.Tensor) -> float:
    """``compute_real_gt_max`` (float32 torch, as the official code runs it)."""
    no_min_features = features - features.min(dim=0)[0]
    no_min_denominator = no_min_features.sum(dim=0)
    part = torch.zeros((num_classes, features.shape[1]))
    for c in labels.unique():
        gt_mask = labels == c
        part[c] = no_min_features[gt_mask].sum(dim=0) / torch.clamp(no_min_denominator, min=1e-8)
    return 1 - part.max(dim=0)[0].mean().item()


def official_contrastiveness(features: np.ndarray, random_state: int) -> float:
    """``1 - gmm_overlap_per_feature(features).mean()``: a 2-component GMM per feature and the
    overlap of its two normals (``statistics.NormalDist.overlap``)."""
    overlaps = []
    for i in range(features.shape[1]):
        gmm = GaussianMixture(n_components=2, random_state=random_state)
        gmm.fit(features[:, i].reshape(-1, 1))
        first = NormalDist(mu=float(gmm.means_[0, 0]), sigma=float(np.sqrt(gmm.covariances_[0, 0, 0])))
        second = NormalDist(mu=float(gmm.means_[1, 0]), sigma=float(np.sqrt(gmm.covariances_[1, 0, 0])))
        overlaps.append(first.overlap(second))
    return 1 - float(np.mean(overlaps))


def official_sid(outputs: torch.Tensor, feature_maps: torch.Tensor, weights: torch.Tensor, k: int) -> float:
    """``MultiKCrossChannelMaxPooledSum(range(1, k + 1), weights, None, func="SumNMax")`` over one batch,
    ``get_result()[0][k - 1]``."""
    maps = feature_maps / torch.clamp(feature_maps.abs().mean(dim=(2, 3), keepdim=True), min=1e-5)
    maps = torch.softmax(maps.reshape(maps.size(0), maps.size(1), -1), 2)
    top_classes = outputs.argmax(dim=1)
    relevant = weights[top_classes]
    max_ks = torch.count_nonzero(weights, 1)[top_classes]
    row = max_ks >= k
    idx = relevant.topk(k)[1][row]
    sub = torch.gather(maps[row], 1, idx.unsqueeze(2).repeat(1, 1, maps.shape[2]))
    cross = sub.max(dim=1)[0]
    return float(cross.sum() / k / len(cross))


# ---- the head --------------------------------------------------------------------------------------
def official_forward(tokens: torch.Tensor, cls: torch.Tensor, mlp: torch.nn.Sequential, linear: torch.nn.Linear,
                     selection: np.ndarray | None = None, mean: torch.Tensor | None = None,
                     std: torch.Tensor | None = None):
    """``Dino2Div.run_mlp`` (normal arch, avg_pooling: the MLP on [patches, CLS], the mean of the patch
    outputs) + ``FinalLayer.transform_output`` (dense: linear; sparse: ``SLDDLevel`` on the selection)."""
    x = torch.cat([tokens, cls[:, None]], dim=1)
    for layer in mlp:
        if isinstance(layer, torch.nn.BatchNorm1d):
            x = layer(x.permute(0, 2, 1)).permute(0, 2, 1)  # BatchNorm1dPermuted
        else:
            x = layer(x)
    patches = x[:, :-1, :]
    feat_vec = patches.mean(dim=1)
    side = int(patches.shape[1] ** 0.5)
    maps = patches.transpose(1, 2).reshape(x.shape[0], -1, side, side)
    if selection is not None:
        feat_vec, maps = feat_vec[:, selection], maps[:, selection]
        logits = linear((feat_vec - mean) / torch.clamp(std, min=1e-6))
    else:
        logits = linear(feat_vec)
    return logits, maps, feat_vec


def official_fdl(feature_maps: torch.Tensor, outputs: torch.Tensor, weight: torch.Tensor,
                 feat_vec: torch.Tensor, scaling: float) -> torch.Tensor:
    """``FeatureDiversityLoss.forward`` with ``preserve_avg_func`` (mask None)."""
    relevant = weight.abs()[outputs.argmax(dim=1)]
    relevant = relevant / (relevant.norm(dim=1) + 1e-5)[:, None]
    max_feat = feat_vec.max(dim=1)[0]
    factor = feat_vec / torch.clamp(max_feat[..., None], min=1e-6)
    soft = torch.softmax(feature_maps.reshape(feature_maps.size(0), feature_maps.size(1), -1), 2)
    scaled = soft * factor[..., None]
    weighted = scaled * relevant[..., None]
    return -weighted.amax(dim=1).sum() / feature_maps.shape[0] * scaling


def pointing_by_loops(peaks: np.ndarray, keypoints: np.ndarray, visible: np.ndarray, labels: np.ndarray,
                      train_peaks: np.ndarray, train_keypoints: np.ndarray, train_visible: np.ndarray,
                      train_labels: np.ndarray, num_classes: int, radius: float) -> float | None:
    """Pointing accuracy as docs/protocol/metrics.md states it, by plain loops over images,
    prototypes and parts: ``peaks`` (N, J, 2) ``(row, col)``, ``keypoints`` (N, P, 2) ``(x, y)``."""
    def hit(peak, keypoint, seen):
        return bool(seen) and ((peak[0] - keypoint[1]) ** 2 + (peak[1] - keypoint[0]) ** 2) ** 0.5 <= radius

    J, P = peaks.shape[1], keypoints.shape[1]
    counts = np.zeros((num_classes, J, P), dtype=int)
    for n in range(len(train_labels)):
        for j in range(J):
            for p in range(P):
                counts[train_labels[n], j, p] += hit(train_peaks[n, j], train_keypoints[n, p], train_visible[n, p])
    hits = total = 0
    for n in range(len(labels)):
        for j in range(J):
            row = counts[labels[n], j]
            if row.max() == 0:
                total += 1
                continue
            p = int(np.argmax(row))
            if visible[n, p]:
                total += 1
                hits += hit(peaks[n, j], keypoints[n, p], True)
    return None if total == 0 else 100.0 * hits / total


def gurobi_assignment(a: np.ndarray, r: np.ndarray | None, threshold: float, n_features: int,
                      n_per_class: int) -> tuple[float, np.ndarray, np.ndarray]:
    """The official Gurobi model (``qpm_solving.solve_qp``: ``existing_edges == mat_w * s``, the
    quadratic penalty ``s_i s_j R̃_ij`` on pairs with ``R_ij ≥ τ``) in the state its iterations end in
    (exactly ``n_per_class`` edges per class, no duplicated classes, added lazily as there), solved to
    optimality (MIPGap 0). Needs gurobipy (its size-limited licence); returns objective, s, edges."""
    import gurobipy as gp
    from gurobipy import GRB

    num_f, num_c = a.shape
    model = gp.Model("assignment")
    model.setParam("OutputFlag", 0)
    model.setParam("MIPGap", 0.0)
    mat_w = model.addMVar((num_f, num_c), vtype=GRB.BINARY, name="edges")
    s = model.addMVar((num_f, 1), vtype=GRB.BINARY, name="features")
    existing = model.addMVar(a.shape, vtype=GRB.BINARY, name="existing_edges")
    model.addConstr(existing == mat_w * s)
    model.addConstr(s.sum() == n_features)
    model.addConstrs(existing[:, c].sum() == n_per_class for c in range(num_c))
    objective = 1000 / (n_per_class * num_c) * (existing * a).sum()
    if r is not None:
        raw = np.array(r, dtype=np.float64)
        np.fill_diagonal(raw, 0.0)
        shifted = raw - raw[raw != 0].min()
        scaled = shifted / shifted.max()
        for i, j in zip(*np.nonzero(np.triu(raw >= threshold, k=1))):
            objective -= s[i, 0] * s[j, 0] * float(scaled[i, j])
    model.setObjective(objective, GRB.MAXIMIZE)
    while True:
        model.optimize()
        edges = np.isclose(existing.X, 1.0)
        columns = {}
        duplicated = False
        for c in range(num_c):
            key = edges[:, c].tobytes()
            if key in columns:
                shared = np.flatnonzero(edges[:, c])
                model.addConstr(existing[shared, columns[key]].sum() + existing[shared, c].sum()
                                <= 2 * n_per_class - 1)
                duplicated = True
            else:
                columns[key] = c
        if not duplicated:
            return model.ObjVal, np.isclose(s.X[:, 0], 1.0), edges
