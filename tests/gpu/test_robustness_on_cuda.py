"""The robustness stage on CUDA (``gpu``; make gpu-check; skipped without CUDA by tests/conftest.py).

One tiny vMFProto run trained on the CPU is scored by the stage (every family) on the CPU and on
CUDA from the same checkpoint: CUDA's fp32 scores equal the CPU's within float reordering, bf16
autocast (gradients through the live trunk under CUDA autocast, where torch.linalg is not widened
as on the CPU) gives finite scores whose attacked images stay inside the ε-ball, and
``deterministic = true`` (deterministic backward through attention) repeats bit for bit.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from benchmark.robustness.options import RobustnessOptions
from benchmark.robustness.stage import run_robustness
from benchmark.run.runner import execute_run
from benchmark.run.store import RESULT_FILE, SPEC_FILE
from tiny_grid import tiny_grid

pytestmark = pytest.mark.gpu
OPTIONS = RobustnessOptions(("misalignment", "faithfulness", "perturbation"), steps=3, images=4, batch_size=4)
#: fp32 on CUDA against the CPU: the same arithmetic in another order (accuracies within one of 4 images)
TOLERANCE_FP32 = 1e-3
TOLERANCE_ACC = 25.0


def _train(root: Path, precision: str) -> Path:
    spec = tiny_grid("g", root / "data").runs[0].with_overrides(image_size=56, precision=precision,
                                                                method_args={"end_to_end_epochs": 1})
    run_dir = root / "runs" / "g" / spec.run_id
    execute_run(spec, run_dir, cache_root=root / "runs" / ".token-cache", progress=False)
    return run_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tmp_path_factory.mktemp("robust_cuda"), "fp32")


@pytest.fixture(scope="module")
def trained_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tmp_path_factory.mktemp("robust_cuda_bf16"), "bf16")


def _copy(run_dir: Path, to: Path, **fields: object) -> Path:
    """The run folder copied with operational ``fields`` of its spec changed (device, deterministic: the
    run id and checkpoint stay valid)."""
    shutil.copytree(run_dir, to)
    for name in (SPEC_FILE, RESULT_FILE):
        data = json.loads((to / name).read_text())
        spec = data if name == SPEC_FILE else data["spec"]
        spec.update(fields)
        (to / name).write_text(json.dumps(data))
    return to


def _scores(section: dict) -> dict[str, float]:
    return {k: v for k, v in section["metrics"].items() if v is not None}


def test_the_stage_on_cuda_fp32_equals_the_cpu(trained: Path, tmp_path: Path) -> None:
    cpu = _scores(run_robustness(_copy(trained, tmp_path / "cpu", device="cpu"), OPTIONS))
    cuda = _scores(run_robustness(_copy(trained, tmp_path / "cuda", device="cuda"), OPTIONS))
    assert set(cpu) == set(cuda)
    for name, value in cpu.items():
        tolerance = TOLERANCE_ACC if name.startswith("acc") else TOLERANCE_FP32 * max(1.0, abs(value))
        assert abs(cuda[name] - value) <= tolerance, (name, value, cuda[name])


def test_bf16_on_cuda_gives_finite_scores_and_deterministic_repeats(trained_bf16: Path, tmp_path: Path) -> None:
    first = run_robustness(_copy(trained_bf16, tmp_path / "a", device="cuda", deterministic=True), OPTIONS)
    again = run_robustness(_copy(trained_bf16, tmp_path / "b", device="cuda", deterministic=True), OPTIONS)
    assert first["provenance"]["precision"] == "bf16"
    assert all(math.isfinite(v) for v in _scores(first).values())
    assert _scores(first) == _scores(again)


def test_the_attack_stays_in_its_budget_under_cuda_autocast() -> None:
    from benchmark.robustness.attack import masked_pgd

    torch.manual_seed(0)
    weights = torch.randn(3 * 8 * 8, device="cuda")
    pixels = torch.rand(2, 3, 8, 8, device="cuda")
    mask = torch.zeros(2, 1, 8, 8, device="cuda")
    mask[..., 4:, :] = 1

    def objective(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return (x.flatten(1) @ weights).float()

    attacked = masked_pgd(objective, pixels, mask, epsilon=0.05, step=0.01, steps=5,
                          generator=torch.Generator().manual_seed(1))
    change = attacked - pixels
    assert change.abs().max() <= 0.05 + 1e-6 and change[..., :4, :].abs().max() == 0
    assert attacked.min() >= 0 and attacked.max() <= 1 and change.abs().max() > 0
