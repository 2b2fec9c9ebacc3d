"""Distinctiveness's float32 peaks (metrics/float32_bilinear.py) against independent oracles:
exact rational arithmetic with one float32 rounding per operation (fractions), torch's own
generic CPU kernels, and NPPP's distinctiveness code run as written on a case built to tie."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from metrics import PartGroundTruth, distinctiveness, explanation_metrics, iou_72, nppp_peaks, peak_positions
from metrics.float32_bilinear import avg_pool_float32, bilinear_float32_at, fma32, linear_taps

SIZE, BOX = 224, 72
# ATen's CPU kernels contract a * b + c to an FMA where the build targets FMA hardware (x86 AVX2 and
# AVX512 dispatch); the DEFAULT (SSE) build rounds twice and cannot be compared bit for bit.
FMA_KERNELS = torch.backends.cpu.get_cpu_capability() in {"AVX2", "AVX512"}


def bilinear_float32(maps: torch.Tensor, size: int = SIZE) -> torch.Tensor:
    """Every pixel of ``(..., h, w)`` float32 maps through :func:`bilinear_float32_at`."""
    flat = maps.reshape(-1, *maps.shape[-2:])
    which, rows, cols = torch.meshgrid(torch.arange(len(flat)), torch.arange(size), torch.arange(size), indexing="ij")
    return bilinear_float32_at(flat, which.flatten(), rows.flatten(), cols.flatten(), size).view(*maps.shape[:-2], size, size)


def round32(q: Fraction) -> Fraction:
    """The float32 nearest to the rational ``q`` (ties to even; normal and subnormal range)."""
    if q == 0:
        return Fraction(0)
    sign, a = (1, q) if q > 0 else (-1, -q)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^e <= a < 2^(e+2)
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    n, rest = divmod(a, ulp)
    if rest > ulp / 2 or (rest == ulp / 2 and n % 2 == 1):
        n += 1
    return sign * n * ulp


def exact(x: float) -> Fraction:
    return Fraction(float(x))


def test_fma32_is_one_rounding_of_the_exact_value() -> None:
    """Random triples, and a product that sits on a float32 midpoint: (1 + 2^-12)^2 = 1 + 2^-11 +
    2^-24 with ±2^-100 added. A float64 sum loses the 2^-100 and a second rounding would tie to
    even; the exact value rounds away from the midpoint."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(3000, generator=g) * 10 ** torch.randint(-3, 4, (3000,), generator=g)).view(3, 1000)
    c[:300] = -(a[:300].double() * b[:300].double()).float()  # cancellation: the low-order bits remain
    got = fma32(a, b, c)
    for x, y, z, r in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist(), strict=True):
        assert exact(r) == round32(exact(x) * exact(y) + exact(z))
    one = torch.tensor([1 + 2**-12] * 3, dtype=torch.float32)
    tiny = torch.tensor([2.0**-100, -(2.0**-100), 0.0], dtype=torch.float32)
    got = fma32(one, one, tiny).tolist()
    assert got == [1 + 2**-11 + 2**-23, 1 + 2**-11, 1 + 2**-11]
    naive = ((one.double() * one.double()) + tiny.double()).float().tolist()
    assert naive[0] != got[0]  # the case double rounding gets wrong


def _aten_bilinear_pixel(m: np.ndarray, row: int, col: int, size: int) -> Fraction:
    """One output pixel of ATen's generic bilinear kernel in exact arithmetic, rounding to float32
    after every operation as compiled (UpSample.h ``area_pixel_compute_source_index``,
    ``guard_index_and_lambda``; UpSampleKernel.cpp ``Interpolate``), an FMA being one rounding."""
    def taps(n_in: int, i: int) -> tuple[int, int, Fraction, Fraction]:
        scale = round32(Fraction(n_in) / n_out)
        src = max(round32(scale * (i + Fraction(1, 2)) - Fraction(1, 2)), Fraction(0))
        i0 = min(math.floor(src), n_in - 1)
        w1 = min(max(round32(src - i0), Fraction(0)), Fraction(1))
        return i0, i0 + (1 if i0 < n_in - 1 else 0), round32(1 - w1), w1

    n_out = size
    h0, h1, hw0, hw1 = taps(m.shape[0], row)
    c0, c1, cw0, cw1 = taps(m.shape[1], col)
    t = [round32(exact(m[r, c0]) * cw0 + round32(exact(m[r, c1]) * cw1)) for r in (h0, h1)]
    return round32(t[0] * hw0 + round32(t[1] * hw1))


@pytest.mark.parametrize("shape", [(8, 8), (16, 16), (7, 9), (1, 5)])
def test_bilinear_float32_equals_the_aten_formula_in_exact_arithmetic(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    m = rng.normal(size=shape).astype(np.float32) * 3
    up = bilinear_float32(torch.from_numpy(m)[None], SIZE)[0]
    pixels = [(0, 0), (SIZE - 1, SIZE - 1), (13, 14), (41, 42)] + [
        (int(r), int(c)) for r, c in rng.integers(0, SIZE, size=(150, 2))]
    for r, c in pixels:
        assert exact(up[r, c]) == _aten_bilinear_pixel(m, r, c, SIZE), (r, c)


def test_linear_taps_at_the_border_and_the_identity() -> None:
    i0, i1, w0, w1 = linear_taps(8, 224)
    assert (i0[:14] == 0).all() and (w1[:14] == 0).all() and (w0[:14] == 1).all()  # src < 0 clamps to 0
    assert (i0[-14:] == 7).all() and (i1[-14:] == 7).all()  # upper neighbour clamped at the border
    i0, i1, w0, w1 = linear_taps(5, 5)
    assert i0.tolist() == list(range(5)) and (w1 == 0).all()


@pytest.mark.skipif(not FMA_KERNELS, reason="torch's CPU kernels here are built without FMA contraction")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 1, 8, 8), (2, 2, 16, 16), (3, 5, 8, 8), (2, 7, 14, 14), (1, 1, 7, 9)])
def test_bilinear_float32_equals_torchs_generic_kernel_bit_for_bit(shape, threads: int) -> None:
    """F.interpolate and F.avg_pool2d on contiguous maps with other than 3 channels run ATen's
    generic kernels (the vectorised one serves channels-last input with C > 3, small outputs,
    and C = 3 on one thread, and rounds differently: why the suite does not call it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(threads)) * 4
        assert torch.equal(bilinear_float32(x), F.interpolate(x, size=(SIZE, SIZE), mode="bilinear"))
        assert torch.equal(avg_pool_float32(x, 2), F.avg_pool2d(x, kernel_size=2, stride=2))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("cell", "peak"), [((1, 2), (41, 69)), ((0, 0), (0, 0)), ((7, 7), (210, 210))])
def test_spec_known_bilinear_answers_hold_in_float32(cell: tuple[int, int], peak: tuple[int, int]) -> None:
    """docs/protocol/metrics.md "Known answers", bilinear one-hot 8x8 cells (41/42 tie in exact arithmetic)."""
    maps = torch.zeros(1, 2, 8, 8)
    maps[0, 0][cell] = 1.0
    maps[0, 1, 3, 3] = 1.0
    assert tuple(nppp_peaks(maps)[0, 0].tolist()) == peak


def test_peaks_do_not_depend_on_batch_layout_or_input_dtype() -> None:
    """The same map gives the same peak alone, in any batch, channels-last, and from bf16 or
    float32 storage of the same values (what made F.interpolate unusable: its kernel choice)."""
    g = torch.Generator().manual_seed(3)
    maps = torch.randn(9, 3, 16, 16, generator=g).bfloat16()
    whole = nppp_peaks(maps.float(), map_pool=2)
    assert torch.equal(whole, nppp_peaks(maps, map_pool=2))
    assert torch.equal(whole, nppp_peaks(maps.float().contiguous(memory_format=torch.channels_last), map_pool=2))
    assert torch.equal(whole, torch.cat([nppp_peaks(maps[i:i + 1].float(), map_pool=2) for i in range(9)]))


@pytest.mark.parametrize("kind", ["normal", "bf16", "flat", "zero", "pool2"])
def test_peaks_from_candidates_equal_the_first_maximum_of_the_whole_float32_map(kind: str) -> None:
    """nppp_peaks evaluates float32 only near the float64 maximum; the answer is the first strict
    maximum of the full float32 grid (constant maps: every pixel a candidate, the first wins)."""
    g = torch.Generator().manual_seed(5)
    maps = torch.randn(6, 4, 16, 16, generator=g) * 3
    if kind == "bf16":
        maps = (maps * 0.25).round().bfloat16().float()  # plateaus of repeated values
    elif kind == "flat":
        maps = torch.full_like(maps, 2.5)
    elif kind == "zero":
        maps = torch.zeros_like(maps)
    pool = 2 if kind == "pool2" else 1
    full = bilinear_float32(avg_pool_float32(maps, 2) if pool == 2 else maps).flatten(-2).argmax(dim=-1)
    expected = torch.stack([full // SIZE, full % SIZE], dim=-1)
    assert torch.equal(nppp_peaks(maps, pool), expected)


def _nppp_distinctiveness(maps: torch.Tensor, map_pool: int) -> float:
    """NPPP ``eval/distinctiveness.py`` as its code runs (float32 network maps): 2x2 average pool,
    ``F.interpolate`` bilinear to 224, ``adaptive_max_pool2d`` indices as box centres, 72-px
    ``cxcywh`` boxes, ``torchvision.ops.box_iou`` per upper-triangle pair, 100 * (1 - mean)."""
    from torchvision.ops import box_convert, box_iou

    acts = maps.float()
    if map_pool == 2:
        acts = F.avg_pool2d(acts, kernel_size=(2, 2), stride=2)
    resized = F.interpolate(acts, size=(SIZE, SIZE), mode="bilinear")
    _, indices = F.adaptive_max_pool2d(resized, output_size=(1, 1), return_indices=True)
    cy, cx = torch.unravel_index(indices, (SIZE, SIZE))
    centres = torch.stack([cy.flatten(1), cx.flatten(1)], dim=-1).float()
    mean_ious = []
    for image in centres:
        boxes = box_convert(torch.cat([image, torch.full_like(image, BOX)], dim=-1), in_fmt="cxcywh", out_fmt="xyxy")
        k = len(boxes)
        pairs = [float(box_iou(boxes[a:a + 1], boxes[b:b + 1])) for a in range(k) for b in range(a + 1, k)]
        mean_ious.append(sum(pairs) / len(pairs))
    return 100.0 * (1.0 - sum(mean_ious) / len(mean_ious))


def _tied_bf16_peak(map_pool: int) -> torch.Tensor:
    """A peak whose neighbours above and below repeat one bf16 value (-1.0625): its upsampled rows
    153 and 154 differ only by float32 rounding; a second prototype peaks one cell above."""
    block = torch.tensor([[-0.12012, -1.0625, -0.10986], [2.3906, 5.0, 2.3906], [-0.38477, -1.0625, -0.10596]])
    maps = torch.full((1, 2, 8, 8), -2.0)
    maps[0, 0, 4:7, 4:7] = block.to(torch.bfloat16).float()
    maps[0, 1, 4, 5] = 1.0
    if map_pool == 2:  # the same maps before NPPP's 2x2 average pooling
        maps = maps.repeat_interleave(2, dim=-1).repeat_interleave(2, dim=-2)
    return maps


@pytest.mark.skipif(not FMA_KERNELS, reason="the official code's float32 values need torch's FMA-built kernels")
@pytest.mark.parametrize("map_pool", [1, 2])
def test_distinctiveness_breaks_ties_as_the_official_code(map_pool: int) -> None:
    """Before (float64 upsampling, first maximum within 1e-12): row 154, 58.26 points; the
    official float32 path takes row 153 and scores 56.87 (one row moves the pair's IoU)."""
    maps = _tied_bf16_peak(map_pool)
    official = _nppp_distinctiveness(maps, map_pool)
    float64_peak = peak_positions(maps, "bilinear", map_pool=map_pool)
    assert float64_peak[0, 0].tolist() == [154, 154]  # the case is a tie the dtype decides
    assert nppp_peaks(maps, map_pool)[0, 0].tolist() == [153, 154]
    before = 100 * (1 - float(iou_72(*float64_peak[0])))
    assert abs(before - official) > 0.5
    # the same centres; the official IoUs are float32 (box_iou of float boxes), ours float64
    assert math.isclose(distinctiveness(maps, map_pool=map_pool), official, abs_tol=1e-5)
    parts = PartGroundTruth(torch.zeros(1, 15, 2, dtype=torch.long), torch.zeros(1, 15, dtype=torch.bool))
    got = explanation_metrics(maps, None, torch.zeros(1, dtype=torch.long), parts, 1, map_pool=map_pool)
    assert math.isclose(got["dis"], official, abs_tol=1e-5)


@pytest.mark.skipif(not FMA_KERNELS, reason="the official code's float32 values need torch's FMA-built kernels")
def test_distinctiveness_agrees_with_the_official_code_on_random_bf16_maps() -> None:
    """Random bf16 maps (repeated values are common at bf16's 8 bits), scored in chunks of 7:
    the official code's value, run one image at a time (C = 5: torch's generic kernel)."""
    maps = torch.randn(40, 5, 16, 16, generator=torch.Generator().manual_seed(0)).bfloat16().float()
    for map_pool in (1, 2):
        official = float(np.mean([_nppp_distinctiveness(maps[i:i + 1], map_pool) for i in range(40)]))
        assert math.isclose(distinctiveness(maps, map_pool=map_pool, chunk_size=7), official, abs_tol=1e-4)
