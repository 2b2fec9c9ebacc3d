"""metrics.explanation_metrics: the harness's entry point (keys, undefined values, argument
errors, devices)."""
from __future__ import annotations

import math

import pytest
import torch

from metrics import METRIC_KEYS, PartGroundTruth, explanation_metrics, nppp_peaks

P = 15
BEAK = 1


def _case(n: int = 6, j: int = 3, grid: int = 8, num_classes: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    maps = torch.randn(n, j, grid, grid, generator=g)
    noisy = maps + 0.3 * torch.randn(n, j, grid, grid, generator=g)
    labels = torch.arange(n) % num_classes
    parts = PartGroundTruth(
        torch.randint(0, 225, (n, P, 2), generator=g), torch.rand(n, P, generator=g) < 0.7
    )
    masks = torch.rand(n, 224, 224, generator=g) < 0.4
    return maps, noisy, labels, parts, masks


def test_keys_and_all_defined() -> None:
    maps, noisy, labels, parts, masks = _case()
    out = explanation_metrics(maps, noisy, labels, parts, 3, masks=masks)
    assert tuple(out) == METRIC_KEYS
    for key in METRIC_KEYS:
        assert isinstance(out[key], float) and 0.0 <= out[key] <= 100.0


def test_one_hot_end_to_end_all_metrics() -> None:
    # one class, 2 prototypes, 2 images with the beak at (x, y) = (100, 100)
    parts_px = torch.zeros(2, P, 2, dtype=torch.int64)
    parts_px[:, BEAK] = 100
    visible = torch.zeros(2, P, dtype=torch.bool)
    visible[:, BEAK] = True
    parts = PartGroundTruth(parts_px, visible)
    clean = torch.zeros(2, 2, 224, 224)
    clean[:, 0, 100, 100] = 1.0  # prototype 0 on the beak in both images -> consistent
    clean[:, 1, 100, 136] = 1.0  # prototype 1 at col 136: region cols 100..172, beak col 100 in -> consistent
    noisy = clean.clone()
    noisy[1, 1] = 0.0
    noisy[1, 1, 200, 200] = 1.0  # moves off the beak in image 1 -> prototype 1 stability 1/2
    masks = torch.zeros(2, 224, 224, dtype=torch.bool)
    masks[:, 100, 100] = True
    out = explanation_metrics(clean, noisy, torch.zeros(2, dtype=torch.int64), parts, 1, masks=masks)
    assert out["con"] == 100.0
    assert out["sta"] == 75.0  # (1 + 1/2) / 2
    assert math.isclose(out["dis"], 100 * (1 - 1 / 3))  # Δcol = 36 -> IoU 1/3 in both images
    # each one-hot map selects its single pixel: union {(100,100), (100,136)}, mask {(100,100)} -> 1/2
    assert math.isclose(out["comp"], 50.0)


def test_undefined_values_are_none() -> None:
    maps, noisy, labels, parts, masks = _case(j=1)
    out = explanation_metrics(maps, None, labels, parts, 3)
    assert out["sta"] is None and out["dis"] is None and out["comp"] is None
    assert isinstance(out["con"], float)
    maps, noisy, labels, parts, masks = _case(j=4)
    assert explanation_metrics(maps, None, labels, parts, 3, topk=1)["dis"] is None
    assert explanation_metrics(maps, None, labels, parts, 3, topk=2)["dis"] is not None


def test_map_pool_and_chunking_do_not_change_results_of_equivalent_inputs() -> None:
    maps, noisy, labels, parts, masks = _case(n=10, grid=16)
    a = explanation_metrics(maps, noisy, labels, parts, 3, masks=masks, map_pool=2, chunk_size=3)
    b = explanation_metrics(
        torch.nn.functional.avg_pool2d(maps, 2), torch.nn.functional.avg_pool2d(noisy, 2), labels, parts, 3,
        masks=masks,
    )
    assert a == b


def test_half_precision_input_is_accepted() -> None:
    maps, noisy, labels, parts, masks = _case()
    out = explanation_metrics(maps.half(), noisy.half(), labels, parts, 3, masks=masks)
    assert all(out[k] is not None for k in METRIC_KEYS)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        (lambda a: {**a, "clean_maps": a["clean_maps"][0]}, "clean_maps"),
        (lambda a: {**a, "noisy_maps": a["noisy_maps"][:, :2]}, "noisy_maps"),
        (lambda a: {**a, "labels": a["labels"][:-1]}, "labels"),
        (lambda a: {**a, "labels": a["labels"] + 5}, "labels"),
        (lambda a: {**a, "labels": a["labels"].float()}, "labels"),
        (lambda a: {**a, "parts": a["parts"][:-1]}, "parts"),
        (lambda a: {**a, "masks": a["masks"][:, :100]}, "masks"),
        (lambda a: {**a, "num_classes": 0}, "num_classes"),
        (lambda a: {**a, "map_pool": 0}, "map_pool"),
        (lambda a: {**a, "chunk_size": 0}, "chunk_size"),
    ],
)
def test_argument_errors_name_the_argument(change, name: str) -> None:
    maps, noisy, labels, parts, masks = _case()
    args = dict(clean_maps=maps, noisy_maps=noisy, labels=labels, parts=parts, num_classes=3, masks=masks)
    with pytest.raises(ValueError, match=f"^{name}"):
        explanation_metrics(**change(args))


@pytest.mark.gpu
def test_cuda_matches_cpu() -> None:
    """Every metric on CUDA equals the CPU's: float64 upsampling (con, sta, comp) to rounding, and
    distinctiveness's float32 peaks exactly (correctly rounded operations on both devices)."""
    maps, noisy, labels, parts, masks = _case(n=70, j=5, grid=16)
    cpu = explanation_metrics(maps, noisy, labels, parts, 3, masks=masks)
    gpu = explanation_metrics(maps.cuda(), noisy.cuda(), labels, parts, 3, masks=masks)
    for key in METRIC_KEYS:
        assert math.isclose(cpu[key], gpu[key], rel_tol=1e-9), key
    assert torch.equal(nppp_peaks(maps, 2), nppp_peaks(maps.cuda(), 2).cpu())  # the box centres, exactly
