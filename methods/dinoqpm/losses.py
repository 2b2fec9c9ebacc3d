"""Q-SENN's feature diversity loss as DINO-QPM trains with it (``training/losses/FeatureDiversityLoss.py``,
``FeatureDiversityLoss.forward`` with ``preserve_avg_func``, no mask)."""
from __future__ import annotations

import torch
from torch import Tensor

#: ``norm_vector``: ``x / (‖x‖ + 1e-5)``; ``preserve_avg_func``: ``clamp(max_feat_vec, min=1e-6)``
WEIGHT_NORM_EPS = 1e-5
MAX_FEATURE_FLOOR = 1e-6


def feature_diversity_loss(maps: Tensor, logits: Tensor, weight: Tensor, vector: Tensor) -> Tensor:
    """``−(1/B) Σ_b Σ_pixels max_k (|w_ĉk| / ‖w_ĉ‖) · (f_bk / max_k f_bk) · softmax_pixels(M_bk)``, ĉ the
    predicted class (the loss's scale factor is the term's weight in ``loss_weights``)."""
    relevant = weight.abs()[logits.argmax(dim=1)]
    relevant = relevant / (relevant.norm(dim=1) + WEIGHT_NORM_EPS)[:, None]
    factor = vector / vector.max(dim=1).values.clamp(min=MAX_FEATURE_FLOOR)[:, None]
    soft = torch.softmax(maps.flatten(2), dim=2)
    weighted = soft * (factor * relevant)[:, :, None]
    return -weighted.amax(dim=1).sum() / maps.shape[0]
