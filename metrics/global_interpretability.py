"""The QPM line's global-interpretability metrics (Norrenbrock et al., Q-SENN AAAI 2024, QPM ICLR 2025;
DINO-QPM CVPR 2026), as the official code ``RobertZimm/DINO-QPM`` @ b7509a2 computes them
(``evaluation/qpm_metrics.py``): ``class_indep``, ``contrastive`` and ``sid5``, in percent.

Inputs: ``features`` N×K, the feature vector the classifier reads on the N training images (one
column per feature or prototype); ``maps`` N×J×h×w, the maps of the J features of each test image's
*predicted* class, with their ``contributions`` N×J to that class's logit.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.special import ndtr
from sklearn.mixture import GaussianMixture
from torch import Tensor

from ._checks import check_labels, check_maps

#: ``compute_real_gt_max``: ``torch.clamp(no_min_denominator, min=1e-8)``
CLASS_SHARE_FLOOR = 1e-8
#: ``MultiKCrossChannelMaxPooledSum(..., func="SumNMax")``: ``clamp(mean|map|, min=1e-5)``
SUMNMAX_FLOOR = 1e-5
#: SID@k's k (``qpm_metrics.py``: ``res[4]``, SID@5)
SID_K = 5
#: the seed of the per-feature Gaussian mixtures (the official code leaves sklearn's unseeded)
GMM_SEED = 0


def _check_features(features: object) -> Tensor:
    if not isinstance(features, Tensor) or features.dim() != 2 or not features.is_floating_point():
        shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(f"features: expected a floating tensor of shape (N, K), got {shape}")
    if features.shape[0] < 2 or features.shape[1] < 1:
        raise ValueError(f"features: needs at least 2 images and 1 feature, got shape {tuple(features.shape)}")
    if not bool(torch.isfinite(features).all()):
        raise ValueError("features: contains NaN or infinite values")
    return features


def class_independence(features: Tensor, labels: Tensor, num_classes: int) -> float:
    """``100 · (1 − mean_k max_c Σ_{n∈c} f'_nk / max(Σ_n f'_nk, 1e-8))`` with ``f' = f − min_n f``
    (``ClassIndependence.compute_real_gt_max``): how little of each feature's mass one class holds."""
    x = _check_features(features).to(torch.float64)
    labels = check_labels("labels", labels, x.shape[0], num_classes, x.device)
    shifted = x - x.min(dim=0).values
    per_class = torch.zeros((num_classes, x.shape[1]), dtype=torch.float64, device=x.device)
    per_class.index_add_(0, labels, shifted)
    share = per_class / shifted.sum(dim=0).clamp(min=CLASS_SHARE_FLOOR)
    return 100.0 * (1.0 - float(share.max(dim=0).values.mean()))


def normal_overlap(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """Overlapping coefficient of two normal densities, element-wise (Inman and Bradley 1989; the
    closed form of Python's ``statistics.NormalDist.overlap``: the densities cross at ``x1, x2``,
    the overlap is ``1 − |Φ_Y(x1) − Φ_X(x1)| − |Φ_Y(x2) − Φ_X(x2)|``; equal variances:
    ``2 Φ(−|Δμ| / 2σ)``). The pair is ordered by (σ, μ) first, as ``overlap`` does."""
    mu1, s1, mu2, s2 = (np.asarray(v, dtype=np.float64) for v in (mu1, sigma1, mu2, sigma2))
    swap = (s2 < s1) | ((s2 == s1) & (mu2 < mu1))
    mx, sx = np.where(swap, mu2, mu1), np.where(swap, s2, s1)
    my, sy = np.where(swap, mu1, mu2), np.where(swap, s1, s2)
    vx, vy = sx * sx, sy * sy
    dv, dm = vy - vx, np.abs(my - mx)
    equal = dv == 0
    safe_dv = np.where(equal, 1.0, dv)
    a = mx * vy - my * vx
    b = sx * sy * np.sqrt(dm * dm + dv * np.log(vy / vx))
    x1, x2 = (a + b) / safe_dv, (a - b) / safe_dv

    def cdf(x: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        return ndtr((x - mu) / sigma)

    unequal = 1.0 - (np.abs(cdf(x1, my, sy) - cdf(x1, mx, sx)) + np.abs(cdf(x2, my, sy) - cdf(x2, mx, sx)))
    same = 2.0 * ndtr(-dm / (2.0 * sx))
    return np.where(equal, same, unequal)


def contrastiveness(features: Tensor, seed: int = GMM_SEED) -> float:
    """``100 · (1 − mean_k OVL_k)``: a two-component Gaussian mixture fitted to each feature over the
    images (sklearn ``GaussianMixture(n_components=2)``, its defaults, ``random_state=seed``) and the
    overlap of its two normals (``Contrastiveness.gmm_overlap_per_feature``). High: every feature is
    either clearly on or clearly off. A constant feature is fitted as the official code fits it
    (sklearn warns that k-means found one cluster): one component on the value, the other empty at 0
    with variance ``reg_covar``, so its overlap is 1 at the value 0 and about 0 elsewhere — an
    artefact of the official definition, kept (docs/protocol/metrics.md)."""
    x = _check_features(features).to(torch.float64).cpu().numpy()
    params = np.empty((x.shape[1], 4))
    for k in range(x.shape[1]):
        gmm = GaussianMixture(n_components=2, random_state=seed).fit(x[:, k:k + 1])
        params[k] = (gmm.means_[0, 0], np.sqrt(gmm.covariances_[0, 0, 0]),
                     gmm.means_[1, 0], np.sqrt(gmm.covariances_[1, 0, 0]))
    overlaps = normal_overlap(params[:, 0], params[:, 1], params[:, 2], params[:, 3])
    return 100.0 * (1.0 - float(overlaps.mean()))


def sid_k(maps: Tensor, contributions: Tensor, k: int = SID_K) -> tuple[float | None, int]:
    """SID@k (``diversity.MultiKCrossChannelMaxPooledSum``, ``func="SumNMax"``) and the k used: each
    map divided by its mean magnitude (floor 1e-5) and soft-maxed over its cells; per image, the
    cell-wise maximum over the k maps with the largest contributions (ties: lower index), summed
    over the cells and divided by k; the mean over images, in percent. With fewer than k maps per
    class the official code reports SID@J (its fallback ``res[-1]``), and so does this."""
    check_maps("maps", maps)
    n, J = maps.shape[:2]
    if not isinstance(contributions, Tensor) or tuple(contributions.shape) != (n, J):
        got = tuple(contributions.shape) if isinstance(contributions, Tensor) else type(contributions).__name__
        raise ValueError(f"contributions: expected shape {(n, J)}, got {got}")
    if n == 0:
        return None, min(k, J)
    k = min(k, J)
    x = maps.to(torch.float64).flatten(2)
    x = x / x.abs().mean(dim=2, keepdim=True).clamp(min=SUMNMAX_FLOOR)
    soft = torch.softmax(x, dim=2)
    order = torch.sort(contributions.to(torch.float64), dim=1, descending=True, stable=True).indices[:, :k]
    chosen = torch.gather(soft, 1, order[:, :, None].expand(-1, -1, soft.shape[2]))
    per_image = chosen.max(dim=1).values.sum(dim=1) / k
    return 100.0 * float(per_image.mean()), k
