"""The agreement report's bootstrap of Kendall's τ over test images, vectorised over resamples
and metric pairs (docs/guides/agreement.md; issue 58).

One cell's resamples are drawn once, by ``scipy.stats.bootstrap`` (percentile interval, its
``vectorized=True`` path: the statistic gets a batch of resamples at once and returns every metric
pair's τ for each, so scipy computes every pair's interval from the same resamples). A resample of
the cell's I test images is a row of draw counts c (how often each image was drawn, Σ c = I); a
method's value on a metric is its mean over seeds of its mean over the drawn images,

    mean over drawn images of seed s = Σ_i c_i·y[s, i]·d[s, i] / Σ_i c_i·d[s, i]

(d = 1 where y[s, i] is defined, 0 where it is NaN: ``numpy.nanmean`` over the drawn images), so a
batch of resamples gives every method's, seed's and metric's sums as one matrix product, counts ×
per-image values (and the defined counts as another where a value is missing). Kendall's τ-b of
the method means of two metrics (Kendall 1945):

    τ_b = (n_c − n_d) / √(n_0 − n_1) / √(n_0 − n_2)

over the pairs of methods, n_c − n_d = Σ_pairs sign(Δx)·sign(Δy), n_0 − n_1 the pairs not tied in
x, n_0 − n_2 those not tied in y, NaN where either ranking ties every method — computed as
``scipy.stats.kendalltau`` computes it (the same operations in the same order, clamped to
[−1, 1]), for every resample and metric pair at once.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from scipy import stats

#: resamples per batch: ~1M draw counts (8 MB) at a time, whatever the number of images
DRAWS_PER_BATCH = 1_000_000


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's τ-b of each row of ``x`` against the same row of ``y`` (shapes (..., n)): shape
    (...); NaN where a row holds a NaN or ties every value (module docstring; equal to
    ``scipy.stats.kendalltau(x[k], y[k]).statistic`` for every row k)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    first, second = np.triu_indices(x.shape[-1], k=1)
    sign_x = np.sign(x[..., first] - x[..., second])
    sign_y = np.sign(y[..., first] - y[..., second])
    concordant_minus_discordant = (sign_x * sign_y).sum(axis=-1)
    untied_x, untied_y = (sign_x != 0).sum(axis=-1), (sign_y != 0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = concordant_minus_discordant / np.sqrt(untied_x) / np.sqrt(untied_y)
    tau = np.clip(tau, -1.0, 1.0)  # scipy: "limit range to fix computational errors"
    undefined = (untied_x == 0) | (untied_y == 0) | np.isnan(x).any(axis=-1) | np.isnan(y).any(axis=-1)
    return np.where(undefined, np.nan, tau)


def draw_counts(images: np.ndarray, n_images: int) -> np.ndarray:
    """How often each of ``n_images`` images is drawn in each resample (``images``: drawn
    indices, shape (resamples, draws)): shape (resamples, n_images), float64 for the product."""
    rows = images.shape[0]
    flat = (images + n_images * np.arange(rows)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * n_images).reshape(rows, n_images).astype(np.float64)


class ResampledMeans:
    """Every method's mean over seeds of its mean over the drawn images, for every metric of one
    cell, from its cubes (metric → methods × seeds × images, NaN where undefined or padded)."""

    def __init__(self, cubes: Mapping[str, np.ndarray]) -> None:
        self.metrics = list(cubes)
        shapes = {cube.shape for cube in cubes.values()}
        if len(shapes) != 1:
            raise ValueError(f"the cubes of one cell have one shape, got {sorted(shapes)}")
        self.methods, self.seeds, self.images = next(iter(shapes))
        stacked = np.stack([cubes[m] for m in self.metrics]).reshape(-1, self.images).T  # images × columns
        missing = np.isnan(stacked)
        self.values = np.where(missing, 0.0, stacked)
        self.partial = np.flatnonzero(missing.any(axis=0))  # columns with a NaN: their own denominators
        self.defined = (~missing[:, self.partial]).astype(np.float64)

    def __call__(self, counts: np.ndarray) -> np.ndarray:
        """Resamples × metrics × methods, from draw counts (resamples × images)."""
        sums = counts @ self.values
        drawn = np.broadcast_to(counts.sum(axis=1, keepdims=True), sums.shape).copy()
        drawn[:, self.partial] = counts @ self.defined
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a seed with no defined drawn image; padded seeds
            per_seed = (sums / drawn).reshape(-1, len(self.metrics), self.methods, self.seeds)
            return np.nanmean(per_seed, axis=-1)


def tau_statistic(cubes: Mapping[str, np.ndarray],
                  pairs: Sequence[tuple[str, str]]) -> Callable[..., np.ndarray]:
    """The bootstrap statistic of one cell: for drawn image indices (…, draws), each pair's τ of
    the two metrics' method means over the drawn images, shape (pairs, …); on the images as they
    are (``arange``) it is the τ of the table."""
    means = ResampledMeans(cubes)
    index = {metric: k for k, metric in enumerate(means.metrics)}

    def statistic(images: np.ndarray, axis: int = -1) -> np.ndarray:
        images = np.moveaxis(np.asarray(images), axis, -1)
        batch = images.reshape(-1, images.shape[-1])
        resampled = means(draw_counts(batch, means.images))
        taus = np.stack([kendall_tau_b(resampled[:, index[a]], resampled[:, index[b]]) for a, b in pairs])
        return taus.reshape(len(pairs), *images.shape[:-1])

    return statistic


def tau_intervals(cubes: Mapping[str, np.ndarray], pairs: Sequence[tuple[str, str]], *, n_resamples: int,
                  seed: int, level: float, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's bootstrap interval of τ over the cell's images (``scipy.stats.bootstrap``, the
    resamples drawn once for every pair): (lows, highs), NaN where the resampled τ is undefined."""
    from threadpoolctl import threadpool_limits

    images = next(iter(cubes.values())).shape[-1]
    # one BLAS thread: OpenBLAS splits a (resamples × images) @ (images × columns) product of this
    # size over threads at ~10× the CPU time on a shared machine (`protobench perf --reading`)
    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
        warnings.simplefilter("ignore")  # a degenerate resample distribution: the NaN interval says so
        result = stats.bootstrap((np.arange(images),), tau_statistic(cubes, pairs), n_resamples=n_resamples,
                                 batch=max(1, DRAWS_PER_BATCH // images), vectorized=True, confidence_level=level,
                                 method=method, rng=np.random.default_rng(seed))
    interval = result.confidence_interval
    return np.atleast_1d(interval.low), np.atleast_1d(interval.high)
