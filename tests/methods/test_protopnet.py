"""ProtoPNet adapter (docs/protocol/protopnet.md): the similarity on hand values, the schedule (pushes
at the end of global epochs 10 and 19, each followed by the last-layer phase), the push inside the
adapter, the expanded variant's parameter groups, argument checks, and training on synthetic tokens."""
from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import torch

from benchmark.run.training import TrainingInterrupted, train
from methods.base import Stage
from methods.protopnet import log_similarity, squared_distances
from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData, TinyAppendedBlock



def _accuracy(method: torch.nn.Module, source: SyntheticTokens) -> float:
    batch = source.batch(torch.arange(len(source)))
    with torch.no_grad():
        return float((method.logits(batch).argmax(1) == batch.labels).float().mean())


def _joint_lrs(stage: Stage) -> list[float]:
    """Learning-rate factor of each epoch of ``stage``, stepping the scheduler as the training loop does."""
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = stage.scheduler(optimizer)
    factors = []
    for _ in range(stage.epochs):
        factors.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return factors


def test_log_similarity_hand_values() -> None:
    d = torch.tensor([0.0, 1.0, 9.0])
    expected = [math.log(1 / 1e-4), math.log(2 / 1.0001), math.log(10 / 9.0001)]
    assert log_similarity(d).tolist() == pytest.approx(expected, rel=1e-6)


def test_squared_distances_hand_values_and_clamp() -> None:
    latent = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # B = 1, N = 2, K = 2
    prototypes = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    # prototype-major B×P×N: ‖(1,2)‖² = 5, ‖(3,4)‖² = 25; ‖0‖² = 0, ‖(2,2)‖² = 8
    assert torch.equal(squared_distances(latent, prototypes), torch.tensor([[[5.0, 25.0], [0.0, 8.0]]]))
    # ‖z‖² − 2z·p + ‖p‖² cancels catastrophically for z = p far from 0; the result is clamped at 0
    big = torch.full((1, 3, 4), 3e3) + torch.tensor([0.0, 1e-3, 2e-3])[None, :, None]
    assert bool((squared_distances(big, big[0]) >= 0).all())


def test_activation_maps_are_the_log_similarity_on_the_grid() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=3)
    torch.manual_seed(0)
    method = build_method("protopnet", source.context(2)).eval()
    batch = source.batch(torch.arange(6))
    with torch.no_grad():
        maps = method.activation_maps(batch, batch.labels)  # B×J×H×W
        pooled = method.pooled_similarities(batch)  # B×P
    own = pooled.view(6, 4, 2)[torch.arange(6), batch.labels]
    assert torch.allclose(maps.flatten(2).amax(-1), own)
    assert maps.shape == (6, 2, *source.grid)


def test_pushes_at_the_end_of_epochs_10_and_19_each_followed_by_the_last_layer_phase() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    torch.manual_seed(0)
    method = build_method("protopnet", source.context(3))
    data = SyntheticTrainData(source)
    joint = method.stages()[1]
    before = copy.deepcopy(method.state_dict())
    with torch.no_grad():
        for epoch in (4, 9, 11, 18):
            method.on_epoch_end(joint, epoch, data)
    assert all(torch.equal(before[k], v) for k, v in method.state_dict().items())
    with torch.no_grad():
        method.on_epoch_end(joint, 10, data)
    assert not torch.equal(method.prototypes, before["prototypes"])
    assert not torch.equal(method.last_layer.weight, before["last_layer.weight"])
    assert torch.equal(method.add_on[0].weight, before["add_on.0.weight"])
    # every prototype is now the latent patch it was pushed from, taken from an image of its class
    assert torch.equal(source.labels[method.push_image], torch.arange(12) // 3)
    with torch.no_grad():
        latent = method.latent(source.batch(method.push_image))
    assert torch.allclose(latent[torch.arange(12), method.push_position], method.prototypes, atol=1e-6)


def test_schedule_and_loss_weights_are_the_papers() -> None:
    source = SyntheticTokens()
    method = build_method("protopnet", source.context(3))
    assert method.loss_weights == {"ce": 1.0, "clst": 0.8, "sep": -0.08, "l1": 1e-4}
    warm, joint = method.stages()
    assert (warm.name, warm.epochs, joint.name, joint.epochs) == ("warm", 5, "joint", 15)
    groups = [(g.name, g.lr, g.weight_decay) for g in warm.param_groups]
    assert groups == [("add_on", 3e-3, 1e-3), ("prototypes", 3e-3, 0.0)]
    assert [g.name for g in joint.param_groups] == ["add_on", "prototypes"]
    assert id(method.last_layer.weight) not in {id(p) for g in joint.param_groups for p in g.params}
    # main.py steps StepLR(5, 0.1) before each joint epoch: ×0.1 from joint epoch 4 (global 9), 9, 14
    assert _joint_lrs(joint) == pytest.approx([1.0] * 4 + [0.1] * 5 + [0.01] * 5 + [0.001])
    assert method.push_epochs == (10, 19)


def test_expanded_block_trains_in_joint_only_without_its_frozen_norm() -> None:
    source = SyntheticTokens()

    def block_with_frozen_norm() -> torch.nn.Module:  # as benchmark.attention.AppendedBlock
        block = TinyAppendedBlock(source.dim)
        block.norm = torch.nn.LayerNorm(source.dim).requires_grad_(False)
        return block

    ctx = dataclasses.replace(source.context(3), make_block=block_with_frozen_norm)
    method = build_method("protopnet", ctx, expanded=True)
    method.requires_grad_(False)  # what the training loop leaves after a stage without the block
    warm, joint = method.stages()
    block = {id(p) for g in joint.param_groups if g.name == "block" for p in g.params}
    assert [g.name for g in warm.param_groups] == ["add_on", "prototypes"]
    assert block == {id(p) for p in method.block.block.parameters()}
    assert [(g.lr, g.weight_decay) for g in joint.param_groups if g.name == "block"] == [(1e-4, 1e-3)]


@pytest.mark.parametrize(("argument", "value"), [
    ("prototype_dim", 0), ("push_epochs", (25,)), ("add_on_lr", -1.0), ("warm_epochs", 1.5),
    ("add_on_weight_decay", float("nan")),
])
def test_bad_hyperparameters_name_the_argument(argument: str, value: object) -> None:
    with pytest.raises((ValueError, TypeError), match=argument):
        build_method("protopnet", SyntheticTokens().context(3), **{argument: value})


def test_trains_far_above_chance_with_the_paper_schedule() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=32)
    torch.manual_seed(0)
    method = build_method("protopnet", source.context(3))
    train(method, source, seed=0, batch_size=16, device=torch.device("cpu"), checkpoint_path=None, log=lambda _: None)
    assert _accuracy(method, source) >= 0.8
    assert bool((method.push_image >= 0).all())
    restored = build_method("protopnet", source.context(3))
    restored.load_state_dict(method.state_dict())
    assert torch.equal(restored.push_image, method.push_image)
    assert _accuracy(restored, source) == _accuracy(method, source)


def test_expanded_variant_trains_the_block_and_learns() -> None:
    # data seed 1: with seed 0, two never-used prototypes are pushed onto background clutter shared by
    # all classes at epoch 19 and the short last-layer phase cannot undo it (ProtoPNet's own behaviour)
    source = SyntheticTokens(num_classes=4, images_per_class=32, seed=1)
    torch.manual_seed(0)
    method = build_method("protopnet", source.context(3), expanded=True)
    initial = copy.deepcopy(method.block.state_dict())
    train(method, source, seed=0, batch_size=16, device=torch.device("cpu"), checkpoint_path=None, log=lambda _: None)
    assert not torch.equal(initial["block.mlp.fc2.weight"], method.block.block.mlp.fc2.weight)
    assert _accuracy(method, source) >= 0.8


def test_resume_after_the_push_epoch_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    """The push and the last-layer phase (its shuffles drawn from the global RNG) run in
    ``on_epoch_end`` before the checkpoint, so a run stopped after epoch 3 resumes exactly."""
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    kwargs = dict(warm_epochs=1, joint_epochs=4, push_epochs=(2, 4), last_layer_epochs=3, last_layer_batch_size=8)
    runs = []
    for stop in (None, 3):
        torch.manual_seed(0)
        method = build_method("protopnet", source.context(2), **kwargs)
        path = tmp_path / f"run{stop}.pt"
        if stop is not None:
            with pytest.raises(TrainingInterrupted):
                train(method, source, seed=1, batch_size=8, device=torch.device("cpu"), checkpoint_path=path,
                      log=lambda _: None, stop_after_epoch=stop)
            torch.manual_seed(123)
            method = build_method("protopnet", source.context(2), **kwargs)
        train(method, source, seed=1, batch_size=8, device=torch.device("cpu"), checkpoint_path=path,
              log=lambda _: None)
        runs.append(method.state_dict())
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])
