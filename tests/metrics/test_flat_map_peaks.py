"""Peaks of flat (constant) maps as EvalProtoPNet's float32 path takes them (issue 29 item 5):
OpenCV's own float32 INTER_CUBIC kernel, then the first exact maximum. The oracle is cv2 itself
(opencv-python-headless, a test extra) with IPP off: the kernel of OpenCV's resize.cpp."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from metrics import PartGroundTruth, part_vectors, peak_positions, stability, stability_score
from metrics.float32_bicubic import cv2_cubic_float32

cv2 = pytest.importorskip("cv2")


@pytest.fixture(autouse=True)
def opencv_own_kernel():
    used = cv2.ipp.useIPP()
    cv2.ipp.setUseIPP(False)
    yield
    cv2.ipp.setUseIPP(used)


def official_peak(m: np.ndarray) -> tuple[int, int]:
    """EvalProtoPNet: ``cv2.resize(m, (224, 224), interpolation=cv2.INTER_CUBIC)`` on a float32
    map, then the first hit of ``np.where(up == up.max())``."""
    up = cv2.resize(m.astype(np.float32), (224, 224), interpolation=cv2.INTER_CUBIC)
    rows, cols = np.where(up == up.max())
    return int(rows[0]), int(cols[0])


@pytest.mark.parametrize("shape", [(7, 7), (14, 14), (16, 16), (8, 8), (16, 12)])
def test_the_float32_kernel_is_opencvs_bit_for_bit(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    for m in (rng.random(shape, dtype=np.float32), np.full(shape, rng.random() * 7, np.float32),
              (rng.standard_normal(shape) * 100).astype(np.float32)):
        ours = cv2_cubic_float32(torch.from_numpy(m)).numpy()
        assert np.array_equal(ours, cv2.resize(m, (224, 224), interpolation=cv2.INTER_CUBIC))


def built_flat_maps(grid: int, n: int = 12, j: int = 4, seed: int = 0) -> torch.Tensor:
    """(n, j, grid, grid) float32 maps, each constant (values as bf16 would round them)."""
    g = torch.Generator().manual_seed(seed)
    values = (torch.rand(n, j, 1, 1, generator=g) * 5).to(torch.bfloat16).float()
    return values.expand(n, j, grid, grid).contiguous()


@pytest.mark.parametrize(("grid", "map_pool"), [(16, 1), (14, 1), (16, 2)])
def test_flat_map_peaks_are_the_official_float32_peaks(grid: int, map_pool: int) -> None:
    maps = built_flat_maps(grid)
    pooled = F.avg_pool2d(maps, map_pool) if map_pool > 1 else maps  # NPPP's pooling (exact on constants)
    expected = torch.tensor([[official_peak(m.numpy()) for m in image] for image in pooled])
    got = peak_positions(maps, "bicubic", map_pool=map_pool)
    assert torch.equal(got, expected)
    assert (expected != 0).any(), "float32 rounding moves flat peaks away from the first pixel"


def test_stability_on_a_built_flat_case_is_the_official_value() -> None:
    n, j, grid, num_classes = 24, 4, 16, 3
    clean, noisy = built_flat_maps(grid, n, j, seed=1), built_flat_maps(grid, n, j, seed=2)
    g = torch.Generator().manual_seed(3)
    parts = PartGroundTruth(torch.randint(0, 224, (n, 6, 2), generator=g), torch.rand(n, 6, generator=g) < 0.8)
    labels = torch.arange(n) % num_classes

    def official_vectors(maps: torch.Tensor) -> torch.Tensor:
        peaks = torch.tensor([[official_peak(m.numpy()) for m in image] for image in maps])
        return part_vectors(peaks, parts)

    official = stability_score(official_vectors(clean), official_vectors(noisy), labels, num_classes)
    assert stability(clean, noisy, labels, parts, num_classes) == pytest.approx(official, abs=1e-12)
    first_pixel = part_vectors(torch.zeros(n, j, 2, dtype=torch.int64), parts)  # the float64 tie rule's peak
    assert stability_score(first_pixel, first_pixel, labels, num_classes) != pytest.approx(official)
