"""Model-parameter randomisation test of an explanation (Adebayo, Gilmer, Muelly, Goodfellow,
Hardt, Kim, "Sanity Checks for Saliency Maps", NeurIPS 2018, Sec. 3.1 and Fig. 2): the maps of the
trained head are compared, per image, with the maps of the same head re-initialised the way the
method initialises it (the frozen trunk unchanged). An explanation that depends on what was learned
changes; one that mostly reflects the input (edges, token norms) does not.

Per image, over the J maps of its ground-truth class:
- Spearman's rank correlation ρ between the trained and the randomised maps, the J maps flattened
  into one vector (the image's explanation as a whole); ranks with ties averaged (scipy's
  ``rankdata``), ρ the Pearson correlation of the ranks; undefined (NaN) when either side is
  constant;
- SSIM (Wang et al., IEEE TIP 2004) of each map pair, each map min-max scaled to [0, 1]
  (``data_range = 1``; a constant map scales to 0), averaged over the J maps: skimage's
  ``structural_similarity`` defaults, a 7×7 uniform window (the largest odd size ≤ the grid when
  the grid is smaller), K1 = 0.01, K2 = 0.03, sample covariances, the mean over the windows that
  lie inside the map.

The scores, in percent, higher = the explanation depends more on the learned parameters:

- ``sanity = 100 · mean_i (1 − ρ_i)`` with ρ_i the Spearman correlation of the *absolute* maps, each
  image's maps first divided by their largest magnitude: the paper's absolute-value panels as
  Quantus computes them (``quantus.MPRT`` defaults: ``normalise=True`` with ``normalise_by_max``,
  then ``abs=True``, ``similarity_func=correlation_spearman``). In [0, 200]: 0 unchanged maps,
  about 100 unrelated ones, above 100 maps whose magnitude ranking is reversed.
- ``sanity_signed = 100 · mean_i (1 − ρ_i)`` with ρ_i the Spearman correlation of the raw (signed)
  maps: the paper's signed panels, recorded beside it (a linear head's sign-reversed map scores 200).

Each mean is over the images where its ρ is defined (a constant side leaves it undefined).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor
from torch.nn import functional as F

from ._checks import check_maps

#: skimage ``structural_similarity``: win_size 7, K1 0.01, K2 0.03 (Wang et al. 2004)
SSIM_WINDOW = 7
SSIM_K1, SSIM_K2 = 0.01, 0.03


@dataclass(frozen=True)
class SanityScores:
    """Per image (N,) ρ of the absolute max-normalised maps, ρ of the signed maps and SSIM (NaN where
    undefined), and the two scores (None: no image defined)."""

    spearman: Tensor
    spearman_signed: Tensor
    ssim: Tensor
    score: float | None
    score_signed: float | None

    @property
    def per_image(self) -> Tensor:
        """(N,) ``100 · (1 − ρ_i)`` of the absolute maps (``sanity``), NaN where ρ is undefined."""
        return 100.0 * (1.0 - self.spearman)

    @property
    def per_image_signed(self) -> Tensor:
        """(N,) ``100 · (1 − ρ_i)`` of the signed maps (``sanity_signed``), NaN where ρ is undefined."""
        return 100.0 * (1.0 - self.spearman_signed)


def absolute_normalised(maps: Tensor) -> Tensor:
    """|maps / max |maps||, the max over each image's J×H×W (Quantus ``normalise_by_max`` then ``abs``;
    an all-zero image stays zero)."""
    peak = maps.abs().amax(dim=(1, 2, 3), keepdim=True)
    return torch.where(peak > 0, maps / torch.where(peak > 0, peak, torch.ones_like(peak)), maps).abs()


def spearman_per_image(trained: Tensor, randomised: Tensor) -> Tensor:
    """(N,) Spearman's ρ of each image's flattened maps (average ranks for ties)."""
    a = trained.flatten(1).double().cpu().numpy()
    b = randomised.flatten(1).double().cpu().numpy()
    out = np.full(len(a), np.nan)
    for i in range(len(a)):
        ra, rb = rankdata(a[i]) - (a.shape[1] + 1) / 2, rankdata(b[i]) - (a.shape[1] + 1) / 2
        denominator = np.sqrt((ra * ra).sum() * (rb * rb).sum())
        if denominator > 0:
            out[i] = float((ra * rb).sum() / denominator)
    return torch.from_numpy(out)


def _unit_range(maps: Tensor) -> Tensor:
    """Each H×W map min-max scaled to [0, 1]; a constant map to 0."""
    low = maps.amin(dim=(-2, -1), keepdim=True)
    span = maps.amax(dim=(-2, -1), keepdim=True) - low
    return torch.where(span > 0, (maps - low) / span.clamp_min(torch.finfo(maps.dtype).tiny), torch.zeros_like(maps))


def ssim_per_image(trained: Tensor, randomised: Tensor) -> Tensor:
    """(N,) mean over the J maps of SSIM with skimage's defaults on maps scaled to [0, 1] (NaN on
    maps narrower than 3)."""
    x, y = _unit_range(trained.double()), _unit_range(randomised.double())
    n, j, h, w = x.shape
    window = min(SSIM_WINDOW, h, w)
    window -= 1 - window % 2  # odd
    if window < 3:  # a 1×1 window has no sample variance: SSIM undefined on maps this small
        return torch.full((n,), torch.nan, dtype=torch.float64)
    x, y = x.reshape(n * j, 1, h, w), y.reshape(n * j, 1, h, w)
    mean = lambda t: F.avg_pool2d(t, window, stride=1)  # noqa: E731 — the windows inside the map (skimage's crop)
    count = window * window
    covariance = count / (count - 1)  # use_sample_covariance=True
    mx, my = mean(x), mean(y)
    vx, vy = covariance * (mean(x * x) - mx * mx), covariance * (mean(y * y) - my * my)
    vxy = covariance * (mean(x * y) - mx * my)
    c1, c2 = (SSIM_K1 * 1.0) ** 2, (SSIM_K2 * 1.0) ** 2  # data_range = 1
    s = ((2 * mx * my + c1) * (2 * vxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return s.mean(dim=(1, 2, 3)).view(n, j).mean(dim=1)


def sanity(trained: Tensor, randomised: Tensor) -> SanityScores:
    """Trained vs randomised N×J×H×W maps of the same images and classes."""
    trained, randomised = check_maps("trained maps", trained), check_maps("randomised maps", randomised)
    if trained.shape != randomised.shape:
        raise ValueError(f"randomised maps: expected the trained maps' shape {tuple(trained.shape)}, "
                         f"got {tuple(randomised.shape)}")
    rho = spearman_per_image(absolute_normalised(trained.double()), absolute_normalised(randomised.double()))
    rho_signed = spearman_per_image(trained, randomised)
    return SanityScores(spearman=rho, spearman_signed=rho_signed, ssim=ssim_per_image(trained, randomised),
                        score=_mean_score(rho), score_signed=_mean_score(rho_signed))


def _mean_score(rho: Tensor) -> float | None:
    """``100 · mean (1 − ρ)`` over the images where ρ is defined (None: none is)."""
    defined = ~torch.isnan(rho)
    return float(100.0 * (1.0 - rho[defined]).mean()) if bool(defined.any()) else None
