"""The 5-epoch schedules of the offline-augmentation grid (cub_ablations.toml, variant offline_aug)
sample each method's official 20-epoch learning-rate curve at the centres of their epochs
(docs/protocol/harness.md, "Grids"). Each schedule is run through the harness's training loop (its optimiser and
scheduler, stepped as in a real run) on synthetic tokens, and the learning rate of every
parameter group in every epoch is compared with a table worked out by hand below."""
from pathlib import Path

import pytest
import torch

from benchmark.grid import load_grid
from benchmark.run.steps import EpochRecord
from benchmark.run.training import train
from methods.registry import build_method
from methods.testing import SyntheticTokens

GRID = Path(__file__).resolve().parents[2] / "benchmark" / "grids" / "cub_ablations.toml"

# Compressed epoch e (0..4) acts as the official epoch at its centre, t = ⌊(e + ½)·20/5⌋ = 2, 6,
# 10, 14, 18; for a joint stage of 15 official epochs starting at global epoch 5 that is joint
# epoch k = t − 5 = 1, 5, 9, 13 for compressed epochs 1..4.
#   ProtoPNet / TesNet: StepLR(5, 0.1) stepped before each joint epoch → ×0.1^⌊(k+1)/5⌋
#     k = 1, 5, 9, 13 → ×1, ×0.1, ×0.01, ×0.01 on add-on 3e-3 and prototypes/basis 3e-3.
#   Deformable ProtoPNet: StepLR(5, 0.2) stepped after each joint epoch → ×0.2^⌊k/5⌋
#     k = 1, 5, 9, 13 → ×1, ×0.2, ×0.2, ×0.04 on 3e-3 (add-on, prototypes) and 1e-4 (offsets).
#   EvalProtoPNet: StepLR(3, 0.2) stepped before → ×0.2^⌊(k+1)/3⌋
#     k = 1, 5, 9, 13 → ×1, ×0.04, ×0.008, ×0.0016 on 3e-3 (add-on, basis) and 1e-6 (aggregation).
#   MGProto (one 20-epoch stage, ×0.4 after epochs 5, 8, 10, 13, 15 — main.py's 30, 45, 60, 75, 90
#     of 120): t = 2, 6, 10, 14, 18 have 0, 1, 3, 4, 5 decays → 3e-3 × 1, 0.4, 0.064, 0.0256, 0.01024.
#   vMFProto / NPPP: a discovery epoch without optimiser, then constant rates.
WARM = {"add_on": 3e-3, "prototypes": 3e-3}
EXPECTED: dict[str, list[tuple[str, dict[str, float] | None]]] = {
    "protopnet": [("warm", WARM)] + [("joint", {"add_on": lr, "prototypes": lr})
                                     for lr in (3e-3, 3e-4, 3e-5, 3e-5)],
    "tesnet": [("warm", {"add_on": 3e-3, "basis": 3e-3})] + [("joint", {"add_on": lr, "basis": lr})
                                                             for lr in (3e-3, 3e-4, 3e-5, 3e-5)],
    "deformable_protopnet": [("warm", WARM)] + [
        ("joint", {"add_on": lr, "prototypes": lr, "offsets": off})
        for lr, off in ((3e-3, 1e-4), (6e-4, 2e-5), (6e-4, 2e-5), (1.2e-4, 4e-6))],
    "evalprotopnet": [("warm", {"add_on": 3e-3, "basis": 3e-3, "aggregation": 1e-6})] + [
        ("joint", {"add_on": lr, "basis": lr, "aggregation": agg})
        for lr, agg in ((3e-3, 1e-6), (1.2e-4, 4e-8), (2.4e-5, 8e-9), (4.8e-6, 1.6e-9))],
    "mgproto": [("joint", {"add_on": lr}) for lr in (3e-3, 1.2e-3, 1.92e-4, 7.68e-5, 3.072e-5)],
    "vmfproto": [("discovery", None)] + [("end_to_end", {"block": 1e-4, "mu": 5e-4, "kappa": 1.2e-3, "pi": 1e-5})] * 4,
    "nppp": [("discovery", None)] + [("finetune", {"block": 1e-4, "score_aggregation": 1e-6})] * 4,
}


def offline_runs() -> dict[str, dict]:
    runs = [spec for spec in load_grid(GRID).runs if spec.variant == "offline_aug"]
    assert all(spec.augmentation == "offline40" for spec in runs)
    return {spec.method: spec.method_args for spec in runs}


def test_every_method_has_a_compressed_schedule_in_the_grid() -> None:
    assert sorted(offline_runs()) == sorted(EXPECTED)


@pytest.mark.parametrize("method_name", sorted(EXPECTED))
def test_learning_rate_of_every_epoch_follows_the_sampled_official_curve(
        method_name: str) -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=6, dim=16)
    torch.manual_seed(0)
    method = build_method(method_name, source.context(2), **offline_runs()[method_name])
    records: list[EpochRecord] = []
    train(method, source, seed=0, batch_size=9, device=torch.device("cpu"), checkpoint_path=None,
          log=lambda line: None, on_epoch_end=records.append)
    seen = [(r.stage, r.lr or None) for r in records]  # a stage that trains nothing has no learning rate
    expected = EXPECTED[method_name]
    assert [stage for stage, _ in seen] == [stage for stage, _ in expected]
    for epoch, ((_, got), (_, want)) in enumerate(zip(seen, expected)):
        if want is None:
            assert got is None, f"epoch {epoch}"
        else:
            assert got == pytest.approx(want, rel=1e-9), f"epoch {epoch}"
