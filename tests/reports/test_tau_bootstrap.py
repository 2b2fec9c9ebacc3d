"""The vectorised bootstrap of ``protobench agreement`` (reports/tau_bootstrap.py) against its
oracles: Kendall's τ-b against ``scipy.stats.kendalltau`` row by row (random, tied, constant and
NaN rows), the resampled method means against ``numpy.nanmean`` over the drawn images, and the
intervals against ``scipy.stats.bootstrap`` run pair by pair with the per-resample statistic
written the plain way (gather the drawn images, ``nanmean``, ``scipy.stats.kendalltau``) on the
same seed: the same resamples give the same bootstrap distribution and the same interval."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from reports.tau_bootstrap import ResampledMeans, draw_counts, kendall_tau_b, tau_intervals, tau_statistic


def scipy_tau(x: np.ndarray, y: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.kendalltau(x, y).statistic)


@pytest.mark.parametrize("values", ["continuous", "tied", "two-valued"])
def test_tau_b_equals_scipys_kendalltau_row_by_row(values: str) -> None:
    rng = np.random.default_rng({"continuous": 0, "tied": 1, "two-valued": 2}[values])
    undefined = []
    for n in (2, 3, 4, 7, 12):
        shape = (300, n)
        if values == "continuous":
            x, y = rng.normal(size=shape), rng.normal(size=shape)
        elif values == "tied":
            x, y = rng.integers(0, 4, shape).astype(float), rng.integers(0, 3, shape).astype(float)
        else:
            x, y = 100.0 * rng.integers(0, 2, shape), rng.integers(0, 2, shape).astype(float)
        got = kendall_tau_b(x, y)
        expected = np.array([scipy_tau(a, b) for a, b in zip(x, y)])
        assert np.array_equal(got, expected, equal_nan=True)  # the same operations: bit for bit
        undefined.append(np.isnan(got).mean())
    if values != "continuous":  # some rows tie every value (NaN, as scipy's), most do not
        assert max(undefined) > 0 and min(undefined) < 0.5


def test_tau_b_of_a_nan_or_a_constant_row_is_nan_as_scipys() -> None:
    x = np.array([[1.0, 2.0, np.nan, 4.0], [3.0, 3.0, 3.0, 3.0], [1.0, 2.0, 3.0, 4.0], [-0.0, 0.0, 1.0, 2.0]])
    y = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    got = kendall_tau_b(x, y)
    assert np.array_equal(got, [scipy_tau(a, b) for a, b in zip(x, y)], equal_nan=True)
    assert np.isnan(got[:3]).all() and got[3] == pytest.approx(np.sqrt(5 / 6))  # −0 ties 0: 5 of 6 pairs untied


def cell_cubes(rng: np.random.Generator, methods: int, seeds: int, images: int, *, binary: bool) -> dict:
    """Per-image values of three metrics (methods × seeds × images); acc 0/100 (many exact ties
    between the methods' means over few images), one metric with undefined images, and the last
    method with one seed fewer (NaN-padded, as reports.agreement pads it)."""
    quality = np.linspace(0.35, 0.65, methods)[:, None, None]
    acc = 100.0 * (rng.random((methods, seeds, images)) < quality) if binary else \
        rng.normal(quality * 100, 20, (methods, seeds, images))
    sta = np.clip(rng.normal(60, 15, (methods, seeds, images)) + 10 * quality, 0, 100)
    sanity = rng.uniform(0, 100, (methods, seeds, images))
    sanity[rng.random(sanity.shape) < 0.1] = np.nan
    cubes = {"acc": acc, "sta": sta, "sanity": sanity}
    for cube in cubes.values():
        cube[-1, -1] = np.nan
    return cubes


def plain_means(cube: np.ndarray, images: np.ndarray) -> np.ndarray:
    """The resampled means written the plain way: gather, nanmean over images, nanmean over seeds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.nanmean(cube[:, :, images], axis=-1), axis=1)  # methods × resamples


def test_resampled_means_are_the_nanmeans_over_the_drawn_images() -> None:
    rng = np.random.default_rng(3)
    cubes = cell_cubes(rng, methods=5, seeds=3, images=50, binary=False)
    cubes["sanity"][2, 0, :] = np.nan  # a seed with no defined image: left out of the mean over seeds
    images = rng.integers(0, 50, (40, 50))
    got = ResampledMeans(cubes)(draw_counts(images, 50))
    for k, metric in enumerate(cubes):
        np.testing.assert_allclose(got[:, k, :], plain_means(cubes[metric], images).T, rtol=1e-13, atol=1e-12)
    acc = ResampledMeans({"acc": 100.0 * (cubes["acc"] > 50)})(draw_counts(images, 50))[:, 0, :]
    assert np.array_equal(acc, plain_means(100.0 * (cubes["acc"] > 50), images).T)  # 0/100 sums: exact


def test_draw_counts_count_every_draw() -> None:
    images = np.array([[0, 0, 3, 1], [2, 2, 2, 2]])
    assert draw_counts(images, 5).tolist() == [[2, 1, 0, 1, 0], [0, 0, 4, 0, 0]]


@pytest.mark.parametrize("binary", [True, False])
def test_intervals_equal_scipys_bootstrap_pair_by_pair_on_the_same_resamples(binary: bool) -> None:
    rng = np.random.default_rng(4)
    cubes = cell_cubes(rng, methods=6, seeds=3, images=40, binary=binary)
    pairs = [("acc", "sta"), ("acc", "sanity"), ("sta", "sanity")]
    lows, highs = tau_intervals(cubes, pairs, n_resamples=500, seed=11, level=0.9, method="percentile")
    together = stats.bootstrap((np.arange(40),), tau_statistic(cubes, pairs), n_resamples=500, vectorized=True,
                               confidence_level=0.9, method="percentile", rng=np.random.default_rng(11))
    for k, (a, b) in enumerate(pairs):
        def plain(images: np.ndarray, axis: int = -1, a: str = a, b: str = b) -> np.ndarray:
            x, y = plain_means(cubes[a], images), plain_means(cubes[b], images)
            return np.array([scipy_tau(x[:, i], y[:, i]) for i in range(images.shape[0])])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alone = stats.bootstrap((np.arange(40),), plain, n_resamples=500, batch=37, vectorized=True,
                                    confidence_level=0.9, method="percentile", rng=np.random.default_rng(11))
        assert np.array_equal(together.bootstrap_distribution[k], alone.bootstrap_distribution, equal_nan=True)
        assert (lows[k], highs[k]) == (alone.confidence_interval.low, alone.confidence_interval.high)
    if binary:  # few images, 0/100 values: ties between methods occur, and are τ-b's, as scipy's
        assert len(np.unique(together.bootstrap_distribution[0])) > 3


def test_the_statistic_on_the_images_as_drawn_is_the_tau_of_the_means() -> None:
    rng = np.random.default_rng(5)
    cubes = cell_cubes(rng, methods=4, seeds=2, images=30, binary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means = {m: np.nanmean(np.nanmean(c, axis=-1), axis=1) for m, c in cubes.items()}
    got = tau_statistic(cubes, [("acc", "sta"), ("sta", "sanity")])(np.arange(30))
    assert got.tolist() == [scipy_tau(means["acc"], means["sta"]), scipy_tau(means["sta"], means["sanity"])]
