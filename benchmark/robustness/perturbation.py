"""Local perturbation analysis: what a prototype responds to (Nauta, Jutte, Provoost and Seifert, 2021,
"This looks like that, because... Explaining prototypes for interpretable image recognition"; code:
CaBRNet, aiakide/CaBRNet, ``cabrnet/core/evaluation/local_perturbation_analysis.py``, ``analyze`` and
``_compute_perturbations``).

For each image: the most relevant prototype of the predicted class (the largest contribution to its
logit, CaBRNet's ``explain`` order), its similarity ``s`` (the map's maximum) at its first argmax
(h, w), and its attribution (the map upsampled bicubically to the image and min-max scaled to
[0, 1]). Each perturbation of the whole image is merged with the clean one through the attribution
(``focus``: ``m · perturbed + (1 − m) · clean``; ``dual``: the mask ``1 − m``), and the relative drop
of the similarity at (h, w), ``(s − s') / s``, is recorded (NaN where ``s ≤ 0``; for log-density maps
the similarity is ``exp(map)``, so ``1 − exp(s' − s)``: metrics/misalignment.py). CaBRNet's factors:
brightness 0.3, contrast 0.2, saturation 0.3, hue 0.2 (torchvision's ``adjust_*``, as its
``ColorJitter((f, f))``), Gaussian blur (kernel 21, σ 2) and a sine distortion (5 periods over the
attribution's box at threshold 0.3, amplitude 7 pixels, both directions). The suite perturbs the
resized S × S image in float pixels (CaBRNet: the original-resolution image, rounded to 8 bits).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torchvision.transforms.functional as TF
from torch import Tensor

from benchmark.robustness.live import LiveMethod
from metrics.maps import upsample_maps
from metrics.misalignment import relative_drop

PERTURBATIONS: tuple[str, ...] = ("brightness", "contrast", "saturation", "hue", "blur", "distortion")
TARGETS: tuple[str, ...] = ("focus", "dual")
PERTURBATION_COLUMNS: tuple[str, ...] = tuple(f"lpa_{p}_{t}" for p in PERTURBATIONS for t in TARGETS)
BRIGHTNESS, CONTRAST, SATURATION, HUE = 0.3, 0.2, 0.3, 0.2  # _compute_perturbations' defaults
BLUR_KERNEL, BLUR_SIGMA = 21, 2.0
DISTORTION_PERIODS, DISTORTION_AMPLITUDE, DISTORTION_PERCENTILE = 5, 7.0, 0.7


def sine_distortion(image: Tensor, attribution: Tensor) -> Tensor:
    """CaBRNet's ``_wave_distortion`` (direction "both") of a 3×S×S image: each row rolled along the
    width by ``int(A sin(2π y p))``, then each column along the height by ``int(A sin(2π x p))``, with
    ``p = periods / max(box width, box height)`` of the attribution's pixels above 1 − 0.7."""
    rows = torch.nonzero((attribution > 1.0 - DISTORTION_PERCENTILE).any(dim=1)).flatten()
    cols = torch.nonzero((attribution > 1.0 - DISTORTION_PERCENTILE).any(dim=0)).flatten()
    extent = max(int(cols[-1] - cols[0]), int(rows[-1] - rows[0]), 1) if len(rows) else 1
    periods = DISTORTION_PERIODS / extent

    def shift(value: int) -> int:
        return int(DISTORTION_AMPLITUDE * math.sin(2.0 * math.pi * value * periods))

    out = image.clone()
    for y in range(out.shape[1]):  # horizontal: np.roll(distortion[y, :], shift(y), axis=0)
        out[:, y, :] = torch.roll(out[:, y, :], shift(y), dims=1)
    for x in range(out.shape[2]):  # vertical: np.roll(distortion[:, x], shift(x), axis=0)
        out[:, :, x] = torch.roll(out[:, :, x], shift(x), dims=1)
    return out


def perturbed(image: Tensor, attribution: Tensor, name: str) -> Tensor:
    """The whole 3×S×S [0, 1] image under perturbation ``name``."""
    if name == "brightness":
        return TF.adjust_brightness(image, BRIGHTNESS)
    if name == "contrast":
        return TF.adjust_contrast(image, CONTRAST)
    if name == "saturation":
        return TF.adjust_saturation(image, SATURATION)
    if name == "hue":
        return TF.adjust_hue(image, HUE)
    if name == "blur":
        return TF.gaussian_blur(image, [BLUR_KERNEL, BLUR_KERNEL], [BLUR_SIGMA, BLUR_SIGMA])
    return sine_distortion(image, attribution)


def perturbation_batch(live: LiveMethod, pixels: Tensor, labels: Tensor, *, log_density: bool = False
                       ) -> dict[str, np.ndarray]:
    """Per image of the batch: :data:`PERTURBATION_COLUMNS` (relative similarity drops; of ``exp(map)``
    for a method whose maps are log densities, metrics/misalignment.py ``relative_drop``)."""
    method = live.method
    size = pixels.shape[-1]
    with torch.no_grad(), live.compute():
        batch = live.tokens(pixels, labels)
        predicted = method.logits(batch).float().argmax(dim=1)
        top = method.prototype_contributions(batch, predicted).float().argmax(dim=1)
        maps = method.activation_maps(batch, predicted).float()
    own = maps[torch.arange(len(labels)), top]  # (B, h, w)
    flat = own.flatten(1)
    score = flat.amax(dim=1)
    where = flat.argmax(dim=1)  # np.where(...)[0]: the first maximum, row-major
    pixel_maps = upsample_maps(own.cpu(), size)
    low = pixel_maps.flatten(1).amin(dim=1)[:, None, None]
    high = pixel_maps.flatten(1).amax(dim=1)[:, None, None]
    attribution = ((pixel_maps - low) / torch.where(high > low, high - low, torch.ones_like(high))).float()
    attribution = attribution.to(pixels.device)
    columns: dict[str, np.ndarray] = {}
    for name in PERTURBATIONS:
        whole = torch.stack([perturbed(pixels[b], attribution[b], name) for b in range(len(labels))])
        for target in TARGETS:
            mask = attribution[:, None] if target == "focus" else 1 - attribution[:, None]
            merged = mask * whole + (1 - mask) * pixels
            with torch.no_grad(), live.compute():
                after = method.activation_maps(live.tokens(merged, labels), predicted).float()
            moved = after[torch.arange(len(labels)), top].flatten(1).gather(1, where[:, None])[:, 0]
            drop = relative_drop(score, moved, log_density=log_density)
            columns[f"lpa_{name}_{target}"] = drop.double().cpu().numpy()
    return columns
