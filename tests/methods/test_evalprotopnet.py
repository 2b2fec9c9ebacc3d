"""EvalProtoPNet adapter (docs/protocol/evalprotopnet.md): SDFA and the score aggregation on hand
values, SDFA only after warm-up and only with early tokens, the schedule, and training on
synthetic tokens."""
from __future__ import annotations

import math

import pytest
import torch

from benchmark.run.training import train
from methods.evalprotopnet import aggregate_scores, sdfa_cost
from methods.registry import build_method
from methods.testing import SyntheticTokens

# one image, N = 3 tokens, J = 1 prototype peaking at token 0: only row 0 of each S is compared
DEEP = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
ROWS = torch.tensor([[0]])


def test_sdfa_is_zero_when_self_similarities_agree_within_the_margin() -> None:
    # S_deep[0] = (1, 0, 1/√2); S_shallow[0] = (1, 0, 1/√1.81) = (1, 0, 0.7433): |Δ| = 0.036 < 0.1
    shallow = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.9]]])
    assert sdfa_cost(DEEP, shallow, ROWS, margin=0.1).item() == 0.0


def test_sdfa_penalises_the_excess_over_the_margin() -> None:
    # S_shallow[0] = (1, 0, 1): |Δ| = (0, 0, 1 − 1/√2); mean over the row of relu(|Δ| − 0.1)
    shallow = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]], requires_grad=True)
    deep = DEEP.clone().requires_grad_(True)
    value = sdfa_cost(deep, shallow, ROWS, margin=0.1)
    assert value.item() == pytest.approx((1 - 1 / math.sqrt(2) - 0.1) / 3, rel=1e-6)
    value.backward()
    assert deep.grad.abs().sum() > 0 and shallow.grad is None  # the shallow side is detached


def test_score_aggregation_hand_example() -> None:
    # C = 2, J = 2; softmax(0, 0)·2 = (1, 1); softmax(ln 3, 0)·2 = (1.5, 0.5)
    weights = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    pooled = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert aggregate_scores(pooled, weights)[0].tolist() == pytest.approx([3.0, 1.5 * 3 + 0.5 * 4])


def test_schedule_loss_weights_and_sdfa_after_warm_up_only() -> None:
    source = SyntheticTokens()
    torch.manual_seed(0)
    method = build_method("evalprotopnet", source.context(3))
    assert type(method).needs_early_tokens
    assert method.loss_weights == {"ce": 1.0, "clst": 0.8, "sep": -0.08, "orth": 1e-4, "sdfa": 0.5}
    warm, joint = method.stages()
    assert [(g.name, g.lr, g.weight_decay) for g in warm.param_groups] == [
        ("add_on", 3e-3, 1e-3), ("basis", 3e-3, 0.0), ("aggregation", 1e-6, 0.0)]
    assert (warm.epochs, joint.epochs) == (5, 15)
    # StepLR(3, 0.2) stepped before each joint epoch (main.py): ×0.2 from global epochs 7, 10, 13, 16, 19
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler, factors = joint.scheduler(optimizer), []
    for _ in range(joint.epochs):
        factors.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert factors == pytest.approx([0.2 ** ((k + 1) // 3) for k in range(15)])
    assert factors[:3] == pytest.approx([1.0, 1.0, 0.2])
    batch = source.batch(torch.arange(8))
    assert "sdfa" not in method.loss_terms(batch, warm, 4)
    assert set(method.loss_terms(batch, joint, 5)) == {"ce", "clst", "sep", "orth", "sdfa"}
    batch.early_tokens = None
    with pytest.raises(RuntimeError, match="early"):
        method.loss_terms(batch, joint, 5)


def test_sdfa_reads_the_early_tokens() -> None:
    source = SyntheticTokens()
    torch.manual_seed(0)
    method = build_method("evalprotopnet", source.context(3))
    joint = method.stages()[1]
    batch = source.batch(torch.arange(8))
    first = method.loss_terms(batch, joint, 5)["sdfa"]
    batch.early_tokens = torch.randn_like(batch.early_tokens)
    assert method.loss_terms(batch, joint, 5)["sdfa"] != first


@pytest.mark.parametrize("expanded", [False, True])
def test_trains_far_above_chance_with_the_paper_schedule(expanded: bool) -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=32)
    torch.manual_seed(0)
    method = build_method("evalprotopnet", source.context(3), expanded=expanded)
    train(method, source, seed=0, batch_size=16, device=torch.device("cpu"), checkpoint_path=None, log=lambda _: None)
    batch = source.batch(torch.arange(len(source)))
    with torch.no_grad():
        accuracy = float((method.logits(batch).argmax(1) == batch.labels).float().mean())
    assert accuracy >= 0.8
    assert torch.allclose(method.basis.norm(dim=1), torch.ones(12))
