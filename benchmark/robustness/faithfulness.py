"""Pixel-level faithfulness through Quantus (Hedström et al., JMLR 2023, understandable-machine-intelligence-lab/
Quantus): the method on its live trunk (:class:`benchmark.robustness.live.LiveMethod`, pixels in
[0, 1]) is the model Quantus calls; the explanation of an image is its ground-truth class's combined
prototype map (metrics/class_evidence.py, the convention of the ground-truth issue), upsampled
bicubically to the image (``metrics.upsample_maps``).

Per image, each a number:
* ``pixel_flipping``: ``quantus.PixelFlipping()``'s curve of the true class's softmax as pixels are
  set to black, most relevant first (Bach et al. 2015), and its area by the trapezoidal rule with
  unit spacing, as ``return_auc_per_sample=True`` computes it (``quantus.helpers.utils.calculate_auc``
  calls ``np.trapz``, which numpy 2 removed, so the area is taken here with ``np.trapezoid``;
  lower: more faithful). Quantus' default flips one pixel per step (50,176 forward passes of a
  224² image); here ``features_in_step`` is the divisor of S² nearest S²/100 (≈ 100 steps, as
  ``RegionPerturbation``'s default 100 regions).
* ``region_perturbation``: ``quantus.RegionPerturbation()`` (Samek et al. 2016; 8×8 patches, 100
  regions, MoRF), its curve of prediction drops averaged: the image's AOPC (higher: more faithful).
* ``road``: ``quantus.ROAD()`` (Rong et al. 2022; noisy linear imputation of 1 %, 3 %, …, 99 % of
  the most relevant pixels), the fraction of those percentages at which the prediction stays the
  true class (lower: more faithful). Quantus 0.6.0's ROAD ranks the map broadcast over the three
  channels (3·S² elements) but imputes per pixel (``noisy_linear_imputation`` indexes S² pixels, and
  fails on RGB images); its imputation is handed the pixels of the ranked elements
  (:func:`pixel_imputation`), so removing p % of the elements removes the p % most relevant pixels.
* ``infidelity``: ``quantus.Infidelity(normalise=True)`` (Yeh et al. 2019; 4×4 patches, 10 samples, MSE;
  lower: more faithful). Its squared error compares the map's sum over a patch with the output's
  change, so it is not invariant to the map's scale; the evidence maps are in each method's logit
  units, so the map is divided by its largest magnitude first (Quantus' ``normalise_by_max``; its
  default is ``normalise=False``).
Every metric with Quantus' defaults otherwise (softmax on, normalised explanations where the
default says so); Quantus draws its noise from numpy's global generator, seeded per batch.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from benchmark.robustness.live import LiveMethod
from metrics.class_evidence import class_evidence_maps
from metrics.maps import upsample_maps

FAITHFULNESS_COLUMNS = ("pixel_flipping", "region_perturbation", "road", "infidelity")
FAITHFULNESS_SEED = 20230101  # numpy's global seed before each batch's Quantus calls (plus the batch's start)


def flipping_step(size: int) -> int:
    """The divisor of ``size²`` nearest ``size² / 100`` (the smaller on a tie)."""
    total = size * size
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    return min(divisors, key=lambda d: (abs(d - total / 100), d))


def evidence_attributions(live: LiveMethod, pixels: Tensor, labels: Tensor) -> np.ndarray:
    """B×1×S×S float32: each image's ground-truth-class evidence map at pixel resolution."""
    with torch.no_grad(), live.compute():
        batch = live.tokens(pixels, labels)
        maps = live.method.activation_maps(batch, labels).float()
        contributions = live.method.prototype_contributions(batch, labels).float()
    evidence = class_evidence_maps(maps, contributions)
    return upsample_maps(evidence.cpu(), pixels.shape[-1])[:, None].float().numpy()


def pixel_imputation(arr: np.ndarray, indices: np.ndarray, **kwargs: Any) -> np.ndarray:
    """Quantus' ``noisy_linear_imputation`` of the pixels of ``indices`` (positions among the C·S²
    elements of ``arr``, C×S×S; a pixel's channels share its relevance, so they come together)."""
    from quantus.functions.perturb_func import noisy_linear_imputation

    pixels = np.unique(np.asarray(indices) % (arr.shape[-1] * arr.shape[-2]))
    return noisy_linear_imputation(arr=arr, indices=pixels, **kwargs)


def quantus_metrics(size: int) -> dict[str, Any]:
    """The four Quantus metrics, as :func:`faithfulness_batch` calls them."""
    import quantus

    class PerImageROAD(quantus.ROAD):  # ROAD's post-processing averages over images; keep each image's curve
        def custom_postprocess(self, **kwargs: Any) -> None:
            pass

    quiet = {"disable_warnings": True, "display_progressbar": False}
    return {
        "pixel_flipping": quantus.PixelFlipping(features_in_step=flipping_step(size), **quiet),
        "region_perturbation": quantus.RegionPerturbation(**quiet),
        "road": PerImageROAD(perturb_func=pixel_imputation, **quiet),
        # normalise=True (Quantus' normalise_by_max): the default False leaves Infidelity in each method's map
        # units (docs/protocol/robustness.md, "Pixel-level faithfulness (Quantus 0.6)")
        "infidelity": quantus.Infidelity(normalise=True, **quiet),
    }


def per_image(name: str, scores: Any) -> np.ndarray:
    """One number per image from what the metric's call returned."""
    if name == "pixel_flipping":  # calculate_auc(curve, dx=1)
        return np.array([float(np.trapezoid(np.asarray(curve, dtype=np.float64), dx=1)) for curve in scores])
    if name == "region_perturbation":
        return np.array([float(np.mean(curve)) for curve in scores])
    if name == "road":
        return np.asarray(scores[0], dtype=np.float64).mean(axis=1)
    return np.asarray(scores, dtype=np.float64)


def faithfulness_batch(live: LiveMethod, pixels: Tensor, labels: Tensor, *, seed: int) -> dict[str, np.ndarray]:
    """Per image of the batch: :data:`FAITHFULNESS_COLUMNS`."""
    attributions = evidence_attributions(live, pixels, labels)
    x = pixels.detach().cpu().numpy()
    y = labels.detach().cpu().numpy()
    rows = {}
    for name, metric in quantus_metrics(pixels.shape[-1]).items():
        np.random.seed(seed)
        scores = metric(model=live, x_batch=x, y_batch=y, a_batch=attributions, channel_first=True,
                        device=str(pixels.device), batch_size=len(y))
        rows[name] = per_image(name, scores)
    return rows
