"""metrics.maps: pooling, upsampling and the first row-major argmax (docs/protocol/metrics.md "Shared core",
"Distinctiveness", "Grid resolution", "Known answers" / upsampling of one-hot maps)."""
from __future__ import annotations

from fractions import Fraction
from math import floor

import pytest
import torch

from metrics import argmax_positions, peak_positions, pool_maps, select_topk_maps, upsample_maps

# (mode, grid n, one-hot cell (row, col), expected argmax (row, col)) — docs/protocol/metrics.md "Known answers"
ONE_HOT_CASES = [
    ("bicubic", 8, (1, 2), (41, 69)),
    ("bicubic", 8, (0, 0), (4, 4)),
    ("bicubic", 8, (7, 7), (219, 219)),
    ("bicubic", 7, (3, 3), (111, 111)),
    ("bicubic", 16, (1, 2), (20, 34)),
    ("bilinear", 8, (1, 2), (41, 69)),
    ("bilinear", 8, (0, 0), (0, 0)),
    ("bilinear", 8, (7, 7), (210, 210)),
]

_A = Fraction(-3, 4)  # Keys' a of cv2.INTER_CUBIC


def _keys(x: Fraction) -> Fraction:
    x = abs(x)
    if x <= 1:
        return (_A + 2) * x**3 - (_A + 3) * x**2 + 1
    if x < 2:
        return _A * x**3 - 5 * _A * x**2 + 8 * _A * x - 4 * _A
    return Fraction(0)


def _exact_weights(n: int, cell: int, mode: str, out: int = 224) -> list[Fraction]:
    """Exact weight of input ``cell`` at each output pixel (half-pixel centres, replicate border)."""
    weights = []
    for i in range(out):
        src = Fraction(2 * i + 1, 2) * Fraction(n, out) - Fraction(1, 2)
        if mode == "bilinear":
            src = max(src, Fraction(0))
            x0 = floor(src)
            taps = [(x0, 1 - (src - x0)), (x0 + 1, src - x0)]
        else:
            x0 = floor(src)
            taps = [(x0 + k, _keys(k - (src - x0))) for k in (-1, 0, 1, 2)]
        weights.append(sum((w for idx, w in taps if min(max(idx, 0), n - 1) == cell), Fraction(0)))
    return weights


def _one_hot(n: int, cell: tuple[int, int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    m = torch.zeros(1, 1, n, n, dtype=dtype)
    m[0, 0, cell[0], cell[1]] = 1.0
    return m


@pytest.mark.parametrize(("mode", "n", "cell", "expected"), ONE_HOT_CASES)
def test_one_hot_argmax_known_answer(mode: str, n: int, cell: tuple[int, int], expected: tuple[int, int]) -> None:
    up = upsample_maps(_one_hot(n, cell), mode=mode)
    assert up.shape == (1, 1, 224, 224) and up.dtype == torch.float64
    assert tuple(argmax_positions(up)[0, 0].tolist()) == expected
    assert tuple(peak_positions(_one_hot(n, cell), mode)[0, 0].tolist()) == expected


@pytest.mark.parametrize(("mode", "n", "cell", "expected"), ONE_HOT_CASES)
def test_one_hot_known_answer_is_exact_arithmetic(
    mode: str, n: int, cell: tuple[int, int], expected: tuple[int, int]
) -> None:
    """Independent check of the table itself: exact rational interpolation, first strict maximum."""
    wr, wc = _exact_weights(n, cell[0], mode), _exact_weights(n, cell[1], mode)
    best, pos = None, None
    for i in range(224):
        for j in range(224):
            v = wr[i] * wc[j]
            if best is None or v > best:
                best, pos = v, (i, j)
    assert pos == expected


def test_tie_goes_to_first_pixel_even_where_rounding_breaks_it() -> None:
    # bilinear 8x8 cell (1, 2): pixels 41/42 and 69/70 tie exactly; float64 rounding makes a
    # strict argmax pick (42, 70). The tolerant rule restores the exact-arithmetic answer.
    up = upsample_maps(_one_hot(8, (1, 2), torch.float64), mode="bilinear")
    assert tuple(argmax_positions(up)[0, 0].tolist()) == (41, 69)


def test_argmax_first_row_major_on_plateau_and_constant() -> None:
    m = torch.zeros(2, 5, 6, dtype=torch.float64)
    m[0, 3, 1] = m[0, 2, 4] = m[0, 3, 0] = 2.0  # three maxima: first row-major is (2, 4)
    out = argmax_positions(m)
    assert out[0].tolist() == [2, 4]
    assert out[1].tolist() == [0, 0]  # constant map -> first pixel
    neg = torch.full((1, 3, 3), -5.0, dtype=torch.float64)
    neg[0, 2, 1] = -1.0
    assert argmax_positions(neg)[0].tolist() == [2, 1]


def test_argmax_distinct_values_not_merged() -> None:
    m = torch.zeros(1, 2, 2, dtype=torch.float64)
    m[0, 0, 0] = 1.0
    m[0, 1, 1] = 1.0 + 1e-9  # well above the 1e-12 relative tie tolerance
    assert argmax_positions(m)[0].tolist() == [1, 1]


def test_pool_maps_2x2_average() -> None:
    m = torch.arange(16.0).reshape(1, 1, 4, 4)
    pooled = pool_maps(m, 2)
    assert pooled.tolist() == [[[[2.5, 4.5], [10.5, 12.5]]]]
    assert pool_maps(m, 1) is m
    assert pool_maps(torch.zeros(1, 1, 16, 16), 2).shape == (1, 1, 8, 8)
    assert pool_maps(torch.zeros(1, 1, 7, 7), 2).shape == (1, 1, 3, 3)  # odd: last row/col dropped
    with pytest.raises(ValueError, match="map_pool"):
        pool_maps(m, 0)


def test_peak_positions_chunking_and_pooling_agree() -> None:
    g = torch.Generator().manual_seed(3)
    maps = torch.randn(11, 3, 16, 16, generator=g)
    full = peak_positions(maps, "bicubic", chunk_size=64)
    assert torch.equal(full, peak_positions(maps, "bicubic", chunk_size=4))
    pooled = peak_positions(maps, "bilinear", map_pool=2, chunk_size=5)
    assert torch.equal(pooled, peak_positions(pool_maps(maps, 2), "bilinear"))


def test_select_topk_maps() -> None:
    maps = torch.zeros(2, 4, 3, 3)
    for k, peak in enumerate([1.0, 4.0, 2.0, 3.0]):
        maps[0, k, 1, 1] = peak
        maps[1, k, 0, 0] = -peak
    top = select_topk_maps(maps, 2)
    assert top.shape == (2, 2, 3, 3)
    assert sorted(top[0].flatten(1).amax(1).tolist()) == [3.0, 4.0]
    assert select_topk_maps(maps, None) is maps
    assert select_topk_maps(maps, 9) is maps  # min(topk, J)


def test_upsample_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode"):
        upsample_maps(torch.zeros(1, 1, 4, 4), mode="nearest")


def test_peak_positions_rejects_bad_maps() -> None:
    with pytest.raises(ValueError, match="maps"):
        peak_positions(torch.zeros(2, 4, 4))
    bad = torch.zeros(1, 1, 4, 4)
    bad[0, 0, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="maps.*NaN"):
        peak_positions(bad)
    with pytest.raises(ValueError, match="floating"):
        peak_positions(torch.zeros(1, 1, 4, 4, dtype=torch.int64))
