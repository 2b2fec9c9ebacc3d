"""The training loop honours a stage's AdamW, per-step warm-up-cosine schedule and gradient clip
(benchmark/run/schedules.py): the learning rate of each epoch's first step follows the closed
form, and a resumed run follows the uninterrupted one step for step (the per-step scheduler's
state is checkpointed)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmark.errors import ProtobenchError
from benchmark.run.schedules import make_optimizer, make_scheduler, warmup_cosine_factor
from benchmark.run.training import EpochRecord, TrainingInterrupted, train
from methods.base import ParamGroup, Stage, WarmupCosine
from methods.registry import build_method
from methods.testing import SyntheticTokens

ARGS = {"epochs": 3, "warmup_epochs": 1, "image_prototypes": 3, "layers": 1, "heads": 2, "feedforward_dim": 16}


def comfe(source: SyntheticTokens):
    return build_method("comfe", source.context(2), **ARGS)


def test_first_step_learning_rates_follow_the_warmup_cosine(tmp_path: Path) -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=8, dim=16, grid=(4, 4))
    records: list[EpochRecord] = []
    method = comfe(source)
    train(method, source, seed=0, batch_size=8, device=torch.device("cpu"), checkpoint_path=None,
          log=lambda line: None, on_epoch_end=records.append)
    schedule = method.schedule
    expected = [5e-4 * warmup_cosine_factor(schedule, step, 6, 2) for step in (0, 2, 4)]
    assert [r.lr["decay"] for r in records] == pytest.approx(expected, rel=1e-12)
    assert expected[0] == pytest.approx(5e-5) and expected[1] == pytest.approx(5e-4)


def test_a_resumed_run_follows_the_uninterrupted_one(tmp_path: Path) -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=8, dim=16, grid=(4, 4))
    whole = comfe(source)
    train(whole, source, seed=0, batch_size=8, device=torch.device("cpu"), checkpoint_path=tmp_path / "a.pt",
          log=lambda line: None)
    resumed = comfe(source)
    with pytest.raises(TrainingInterrupted):
        train(resumed, source, seed=0, batch_size=8, device=torch.device("cpu"), checkpoint_path=tmp_path / "b.pt",
              log=lambda line: None, stop_after_epoch=2)
    again = comfe(source)
    train(again, source, seed=0, batch_size=8, device=torch.device("cpu"), checkpoint_path=tmp_path / "b.pt",
          log=lambda line: None)
    for (name, a), b in zip(whole.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name


def test_optimiser_and_schedule_declarations_are_checked() -> None:
    weight = torch.nn.Parameter(torch.ones(2))
    stage = Stage("s", 1, [ParamGroup("g", [weight], 0.1, 0.5)], optimizer="adamw",
                  step_schedule=WarmupCosine(1, 0.1, 0.01))
    assert isinstance(make_optimizer(stage), torch.optim.AdamW)
    both = Stage("s", 1, stage.param_groups, scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1),
                 step_schedule=WarmupCosine(1, 0.1, 0.01))
    with pytest.raises(ProtobenchError, match="declare one of them"):
        make_scheduler(both, make_optimizer(stage), 2)
    with pytest.raises(ProtobenchError, match="adam | adamw | sgd"):
        make_optimizer(Stage("s", 1, stage.param_groups, optimizer="lamb"))
