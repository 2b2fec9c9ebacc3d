"""GPU checks (``make gpu-check``; marked ``gpu``, skipped without CUDA by tests/conftest.py).

Every method through the harness on CUDA for two epochs; the same run twice gives the same
metrics, exactly — or, for the methods whose CUDA kernels accumulate with atomics in an
unspecified order (NPPP's ``index_add_``, Deformable ProtoPNet's ``grid_sample`` backward;
docs/protocol/harness.md), within TOLERANCE_NONDETERMINISTIC; bf16 within
TOLERANCE_BF16 of fp32; a token cache built on the GPU equal to one built on the CPU within
fp16 storage tolerance; ``perf --paper-scale`` on CUDA.

The only non-GPU test here checks that the two-epoch schedules below are valid method
arguments, so a typo cannot hide until a GPU machine runs this file.
"""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from benchmark.cli import main
from benchmark.config import RunSpec
from benchmark.grid import parse_grid
from benchmark.estimates.workload import run_epochs
from benchmark.run.runner import execute_run
from methods.registry import get_method_class, list_methods, stand_in_method
from short_schedules import ONE_EPOCH, TWO_EPOCHS

#: methods with atomically accumulated CUDA kernels (run-to-run float reordering); ComFe: the
#: backward of torch.gather and of the decoder's attention (H100, 2026-11-27: comp and loc
#: differed in the 6th digit between two runs)
NONDETERMINISTIC = {"nppp", "deformable_protopnet", "comfe"}
#: those whose atomics all have deterministic kernels (``deterministic = true`` repeats bit for bit)
DETERMINISTIC_WHEN_ASKED = sorted(m for m in NONDETERMINISTIC
                                  if not get_method_class(m).cuda_ops_without_deterministic_kernel)
CLASSES, IMAGES_PER_CLASS = 4, 16
TEST_IMAGES = CLASSES * (IMAGES_PER_CLASS // 2)
# Two runs of an atomics-using method may differ in float reordering only, which can flip an
# image near a decision boundary: accuracy within one test image, the continuous explanation
# metrics (percent) within 1 point.
TOLERANCE_NONDETERMINISTIC = {"acc": 100 / TEST_IMAGES, "other": 1.0}
# bf16 keeps 8 significant bits (relative rounding 2^-9): after two epochs, accuracy within two
# test images and the explanation metrics within 5 points of fp32.
TOLERANCE_BF16 = {"acc": 2 * 100 / TEST_IMAGES, "other": 5.0}

needs_cuda = pytest.mark.gpu


def _grid(root: Path, method: str, **extra: object):
    return parse_grid({"name": "gpu", "defaults": {
        "dataset": "synthbirds", "data_root": str(root / "synthbirds"),
        "dataset_args": {"classes": CLASSES, "images_per_class": IMAGES_PER_CLASS, "seed": 0},
        "backbone": "dinov2_vits14", "weights": "random",
        "backbone_args": {"depth": 4, "embed_dim": 96, "num_heads": 3},
        "batch_size": 16, "eval_batch_size": 32, "prototypes_per_class": 3, "seed": 0, "device": "cuda",
        "method": method, "method_args": TWO_EPOCHS[method], **extra}}, source="tests/gpu/test_methods_on_cuda.py")


def _run(root: Path, spec: RunSpec, name: str) -> dict[str, object]:
    return execute_run(spec, root / name / spec.run_id, cache_root=root / "cache", progress=False,
                       log=lambda line: None)


def _assert_metrics_close(a: dict[str, float | None], b: dict[str, float | None], tolerance: dict[str, float]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        if a[name] is None or b[name] is None:
            assert a[name] is None and b[name] is None, name
            continue
        allowed = tolerance["acc"] if name == "acc" else tolerance["other"]
        assert abs(a[name] - b[name]) <= allowed, f"{name}: {a[name]:.3f} vs {b[name]:.3f} (tolerance {allowed})"


def test_two_epoch_schedules_are_valid_for_every_method() -> None:
    assert set(TWO_EPOCHS) == set(list_methods())
    for method, args in TWO_EPOCHS.items():
        spec = _grid(Path("/nowhere"), method, device="cpu").runs[0]
        stand_in_method(method, args, 3)  # rejects bad hyperparameters
        assert run_epochs(spec) == (1 if method in ONE_EPOCH else 2), method


@needs_cuda
@pytest.mark.parametrize("method", sorted(TWO_EPOCHS))
def test_method_trains_on_cuda_and_repeats(tmp_path_factory: pytest.TempPathFactory, method: str) -> None:
    root = tmp_path_factory.mktemp(f"gpu-{method}")
    spec = _grid(root, method).runs[0]
    first, second = _run(root, spec, "first"), _run(root, spec, "second")
    assert "cuda" in json.dumps(first["provenance"]).lower()
    assert all(v is not None for v in first["metrics"].values())
    if method in NONDETERMINISTIC:
        _assert_metrics_close(first["metrics"], second["metrics"], TOLERANCE_NONDETERMINISTIC)
    else:
        assert first["metrics"] == second["metrics"]


@needs_cuda
@pytest.mark.parametrize("method", DETERMINISTIC_WHEN_ASKED)
def test_atomic_methods_repeat_bit_for_bit_with_deterministic_true(tmp_path: Path, method: str) -> None:
    """ComFe's two runs were identical on an H100 (2026-11-27); NPPP's atomics are ``index_add_``."""
    spec = _grid(tmp_path, method, deterministic=True).runs[0]
    assert _run(tmp_path, spec, "first")["metrics"] == _run(tmp_path, spec, "second")["metrics"]


@needs_cuda
@pytest.mark.parametrize("method", ["vmfproto", "nppp"])
def test_bf16_metrics_are_close_to_fp32(tmp_path_factory: pytest.TempPathFactory, method: str) -> None:
    if "precision" not in {f.name for f in fields(RunSpec)}:
        pytest.skip("RunSpec has no `precision` field: nothing to compare")
    root = tmp_path_factory.mktemp(f"bf16-{method}")
    fp32 = _run(root, _grid(root, method, precision="fp32").runs[0], "fp32")
    bf16 = _run(root, _grid(root, method, precision="bf16").runs[0], "bf16")
    _assert_metrics_close(fp32["metrics"], bf16["metrics"], TOLERANCE_BF16)


@needs_cuda
def test_gpu_built_cache_matches_cpu_built_cache(tmp_path: Path) -> None:
    """Full-size ViT-S/14 (random weights), 16 images, float16 storage. The two passes differ by
    fp16 rounding (one unit in the last place, 2^-10 relative) on top of the trunk's fp32
    reorderings and cuDNN's TF32 patch-embedding convolution (about 2^-10 relative per op): each
    array within 1% of its RMS plus 1% of each value."""
    from benchmark.run.prepare import prepare

    spec = _grid(tmp_path, "vmfproto", backbone_args={}, device="cpu",
                 dataset_args={"classes": 2, "images_per_class": 16, "seed": 0}).runs[0]
    prep = prepare(spec)
    indices = torch.arange(16)
    cpu = prep.train_source(tmp_path / "cache-cpu").batch(indices, "cpu")
    prep.trunk.to("cuda")
    prep.device = torch.device("cuda")
    gpu = prep.train_source(tmp_path / "cache-gpu").batch(indices, "cpu")
    for name in ("tokens", "block_input", "attention"):
        a, b = getattr(gpu, name), getattr(cpu, name)
        rms = b.pow(2).mean().sqrt().item()
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2 * rms, msg=name)


@needs_cuda
def test_perf_paper_scale_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the preset generates its synthbirds under ./data/
    out = tmp_path / "perf.json"
    assert main(["perf", "--paper-scale", "--device", "cuda", "--runs-dir", str(tmp_path / "runs"),
                 "--timed-batches", "3", "--warmup", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert sorted(r["method_name"] for r in rows) == sorted(TWO_EPOCHS)
    for row in rows:
        assert (row["classes"], row["prototypes_per_class"], row["embed_dim"], row["tokens"], row["batch_size"]) \
            == (200, 5, 768, 256, 128)
        assert "cuda" in row["device"] and row["method_inference_images_per_second"] > 0
