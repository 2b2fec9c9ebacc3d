"""Independent oracles for the vectorised metrics.

1. A numpy re-implementation of ``cv2.resize(..., INTER_CUBIC)`` for upscaling (Keys kernel
   a = -0.75, half-pixel centres, border replicate) and of bilinear resizing, checked against
   torch ``F.interpolate(align_corners=False)``: docs/protocol/metrics.md step 1 claims agreement within 1e-5
   and the same argmax.
2. A plain-loop evaluation written like the official code (per class, per prototype, per
   image, per part; EvalProtoPNet ``get_corresponding_object_parts`` / ``evaluate_*``, NPPP
   ``batch_mean_IoU_bbox`` / ``batch_IoU_binary``), compared with the vectorised functions
   on random maps and parts.
"""
from __future__ import annotations

import math
from functools import lru_cache
from math import floor

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from metrics import (
    PartGroundTruth,
    comprehensiveness,
    consistency,
    distinctiveness,
    explanation_metrics,
    part_hit_ratios,
    part_vectors,
    peak_positions,
    stability,
    unchanged_fractions,
    upsample_maps,
)

SIZE, HALF, BOX = 224, 36, 72


# ---------------------------------------------------------------- resize oracles (numpy)
def _keys(x: float, a: float = -0.75) -> float:
    x = abs(x)
    if x <= 1.0:
        return (a + 2.0) * x**3 - (a + 3.0) * x**2 + 1.0
    if x < 2.0:
        return a * x**3 - 5.0 * a * x**2 + 8.0 * a * x - 4.0 * a
    return 0.0


@lru_cache(maxsize=None)
def _cubic_matrix(n_in: int, n_out: int = SIZE) -> np.ndarray:
    """(n_out, n_in) weights: src = (i + 0.5) * n_in / n_out - 0.5, taps floor(src) - 1 .. + 2,
    indices clamped to the border (replicate), as cv2 INTER_CUBIC does."""
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = (i + 0.5) * n_in / n_out - 0.5
        x0 = floor(src)
        t = src - x0
        for k in (-1, 0, 1, 2):
            w[i, min(max(x0 + k, 0), n_in - 1)] += _keys(k - t)
    return w


@lru_cache(maxsize=None)
def _linear_matrix(n_in: int, n_out: int = SIZE) -> np.ndarray:
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = max((i + 0.5) * n_in / n_out - 0.5, 0.0)
        x0 = floor(src)
        t = src - x0
        w[i, min(x0, n_in - 1)] += 1.0 - t
        w[i, min(x0 + 1, n_in - 1)] += t
    return w


def _resize(m: np.ndarray, mode: str) -> np.ndarray:
    make = _cubic_matrix if mode == "bicubic" else _linear_matrix
    return make(m.shape[0]) @ m @ make(m.shape[1]).T


def _first_argmax(u: np.ndarray) -> tuple[int, int]:
    idx = np.where(u == u.max())  # EvalProtoPNet: first of np.where(m == m.max())
    return int(idx[0][0]), int(idx[1][0])


def test_library_upsampling_equals_f_interpolate_non_square_and_identity() -> None:
    g = torch.Generator().manual_seed(0)
    for shape in [(3, 16, 12), (2, 224, 224), (2, 1, 5), (2, 30, 30)]:
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        for mode in ("bicubic", "bilinear"):
            ref = F.interpolate(x[:, None], size=(SIZE, SIZE), mode=mode, align_corners=False)[:, 0]
            assert (upsample_maps(x, mode=mode) - ref).abs().max() < 1e-12, (shape, mode)
    x = torch.randn(2, 224, 224, generator=g, dtype=torch.float64)
    assert torch.equal(upsample_maps(x, mode="bicubic"), x)  # 224 -> 224: weights (0, 1, 0, 0)
    assert torch.equal(upsample_maps(x, mode="bilinear"), x)


@pytest.mark.parametrize("n", [7, 8, 14, 16])
@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_torch_upsampling_matches_numpy_oracle(n: int, mode: str) -> None:
    rng = np.random.default_rng(n)
    maps = rng.normal(size=(12, n, n)).astype(np.float32)
    t = torch.from_numpy(maps)[:, None]
    up32 = F.interpolate(t, size=(SIZE, SIZE), mode=mode, align_corners=False)[:, 0]
    up64 = F.interpolate(t.double(), size=(SIZE, SIZE), mode=mode, align_corners=False)[:, 0]
    ours_up = upsample_maps(t, mode=mode)[:, 0]  # the library's matrix form, float64
    ours = peak_positions(t, mode)[:, 0]
    for k in range(maps.shape[0]):
        ref = _resize(maps[k].astype(np.float64), mode)
        assert np.abs(up32[k].numpy() - ref).max() < 1e-5  # docs/protocol/metrics.md: torch == cv2 within 1e-5
        assert np.abs(up64[k].numpy() - ref).max() < 1e-12
        assert np.abs(ours_up[k].numpy() - ref).max() < 1e-12
        pos = _first_argmax(ref)
        assert divmod(int(up32[k].flatten().argmax()), SIZE) == pos  # torch float32, strict argmax
        assert tuple(ours[k].tolist()) == pos


# ---------------------------------------------------------------- plain-loop metric oracle
def _oracle(
    clean: np.ndarray,
    noisy: np.ndarray,
    labels: np.ndarray,
    part_px: np.ndarray,
    visible: np.ndarray,
    masks: np.ndarray,
    num_classes: int,
    map_pool: int,
) -> dict[str, object]:
    n, j = clean.shape[:2]
    p_num = part_px.shape[1]

    def pooled(m: np.ndarray) -> np.ndarray:
        if map_pool == 1:
            return m
        h, w = m.shape[0] // map_pool, m.shape[1] // map_pool
        return m[: h * map_pool, : w * map_pool].reshape(h, map_pool, w, map_pool).mean(axis=(1, 3))

    def proto_to_part(maps: np.ndarray, i: int, k: int) -> np.ndarray:
        r, c = _first_argmax(_resize(pooled(maps[i, k]), "bicubic"))
        region = (max(0, r - HALF), min(SIZE, r + HALF), max(0, c - HALF), min(SIZE, c + HALF))
        row = np.zeros(p_num)
        for p in range(p_num):
            if not visible[i, p]:
                continue
            x, y = part_px[i, p]
            if region[0] <= y <= region[1] and region[2] <= x <= region[3]:
                row[p] = 1
        return row

    ratios = np.zeros((num_classes, j, p_num))
    flags = np.zeros((num_classes, j))
    fractions = np.full((num_classes, j), np.nan)
    for cls in range(num_classes):
        ids = [i for i in range(n) if labels[i] == cls]
        for k in range(j):
            if not ids:
                continue
            o = np.array([proto_to_part(clean, i, k) for i in ids])
            o_noise = np.array([proto_to_part(noisy, i, k) for i in ids])
            mask = np.array([visible[i].astype(float) for i in ids])
            denom = mask.sum(axis=0)
            denom = np.where(denom == 0, 1, denom)
            ratios[cls, k] = o.sum(axis=0) / denom
            flags[cls, k] = float((ratios[cls, k] >= 0.8).any())
            fractions[cls, k] = (np.abs(o - o_noise).sum(axis=-1) == 0).mean()

    mean_ious, comp_ious = [], []
    for i in range(n):
        ups = [_resize(pooled(clean[i, k]), "bilinear") for k in range(j)]
        centres = [_first_argmax(u) for u in ups]
        pair_ious = []
        for a in range(j):
            for b in range(a + 1, j):
                # xyxy boxes, unclipped; continuous areas
                (ra, ca), (rb, cb) = centres[a], centres[b]
                ba = [ca - BOX / 2, ra - BOX / 2, ca + BOX / 2, ra + BOX / 2]
                bb = [cb - BOX / 2, rb - BOX / 2, cb + BOX / 2, rb + BOX / 2]
                iw = max(0.0, min(ba[2], bb[2]) - max(ba[0], bb[0]))
                ih = max(0.0, min(ba[3], bb[3]) - max(ba[1], bb[1]))
                inter = iw * ih
                pair_ious.append(inter / (BOX * BOX * 2 - inter))
        mean_ious.append(sum(pair_ious) / len(pair_ious))
        union = np.zeros((SIZE, SIZE), dtype=bool)
        for u in ups:
            if u.max() > u.min():
                union |= (u - u.min()) / (u.max() - u.min()) >= 0.6
        inter = np.logical_and(union, masks[i]).sum()
        uni = np.logical_or(union, masks[i]).sum()
        comp_ious.append(inter / uni if uni else 0.0)

    defined = fractions[~np.isnan(fractions)]
    return {
        "ratios": ratios,
        "fractions": fractions,
        "con": 100.0 * flags.mean(),
        "sta": 100.0 * defined.mean(),
        "dis": 100.0 * (1.0 - sum(mean_ious) / len(mean_ious)),
        "comp": 100.0 * sum(comp_ious) / len(comp_ious),
    }


def _random_case(seed: int, n: int, j: int, grid: int, num_classes: int):
    """Maps with a bump near a target part per (class, prototype), parts uniform in the frame
    (a few outside it), so that consistency and stability land strictly between 0 and 100."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, size=n)
    labels[:num_classes] = np.arange(num_classes)  # every class has an image
    part_px = rng.integers(-10, SIZE + 10, size=(n, 15, 2))
    visible = rng.random((n, 15)) < 0.7
    target = rng.integers(0, 15, size=(num_classes, j))
    yy, xx = np.mgrid[0:grid, 0:grid]
    cell = SIZE / grid
    clean = rng.normal(scale=0.3, size=(n, j, grid, grid))
    for i in range(n):
        for k in range(j):
            x, y = part_px[i, target[labels[i], k]]
            bump = np.exp(-(((yy + 0.5) * cell - y) ** 2 + ((xx + 0.5) * cell - x) ** 2) / (2 * (1.5 * cell) ** 2))
            clean[i, k] += rng.uniform(0.0, 2.0) * bump
    noisy = clean + rng.normal(scale=0.25, size=clean.shape)
    masks = rng.random((n, 1, 1)) < 0.5
    masks = np.broadcast_to(masks, (n, SIZE, SIZE)).copy()
    masks[:, :100, :] ^= True
    return clean, noisy, labels, part_px, visible, masks


@pytest.mark.parametrize(("grid", "map_pool"), [(8, 1), (16, 2), (7, 1)])
def test_vectorised_metrics_match_plain_loop_oracle(grid: int, map_pool: int) -> None:
    n, j, num_classes = 30, 4, 5
    clean, noisy, labels, part_px, visible, masks = _random_case(grid, n, j, grid, num_classes)
    ref = _oracle(clean, noisy, labels, part_px, visible, masks, num_classes, map_pool)
    for key in ("con", "sta", "dis", "comp"):  # the case is not degenerate
        assert 0.0 < ref[key] < 100.0, (key, ref[key])

    t_clean, t_noisy = torch.from_numpy(clean).float(), torch.from_numpy(noisy).float()
    t_labels = torch.from_numpy(labels)
    parts = PartGroundTruth(torch.from_numpy(part_px).long(), torch.from_numpy(visible))
    t_masks = torch.from_numpy(masks)
    # the oracle ran on float64 maps; float32 inputs must not move any argmax
    clean64_peaks = peak_positions(torch.from_numpy(clean), "bicubic", map_pool=map_pool)
    assert torch.equal(clean64_peaks, peak_positions(t_clean, "bicubic", map_pool=map_pool))

    o_clean = part_vectors(clean64_peaks, parts)
    o_noisy = part_vectors(peak_positions(t_noisy, "bicubic", map_pool=map_pool), parts)
    np.testing.assert_array_equal(part_hit_ratios(o_clean, parts.visible, t_labels, num_classes).numpy(), ref["ratios"])
    np.testing.assert_allclose(unchanged_fractions(o_clean, o_noisy, t_labels, num_classes).numpy(), ref["fractions"])

    got = explanation_metrics(t_clean, t_noisy, t_labels, parts, num_classes, map_pool=map_pool, masks=t_masks,
                              chunk_size=7)
    for key in ("con", "sta", "dis", "comp"):
        assert math.isclose(got[key], ref[key], rel_tol=1e-12, abs_tol=1e-9), key
    assert math.isclose(consistency(t_clean, t_labels, parts, num_classes, map_pool=map_pool), ref["con"])
    assert math.isclose(stability(t_clean, t_noisy, t_labels, parts, num_classes, map_pool=map_pool), ref["sta"])
    assert math.isclose(distinctiveness(t_clean, map_pool=map_pool, chunk_size=9), ref["dis"])
    assert math.isclose(comprehensiveness(t_clean, t_masks, map_pool=map_pool, chunk_size=5), ref["comp"])
