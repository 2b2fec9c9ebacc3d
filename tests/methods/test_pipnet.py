"""PIP-Net adapter against reference loops written from the official code's behaviour
(``M-Nauta/PIPNet`` @ 12c4da7): the forward pass on the official B×D×H×W layout with a 1×1
convolution, ``calculate_loss`` of train.py on the two views concatenated, one optimiser step
(AdamW with weight decay 0 on the net and the classifier, then the weight shrink), the epoch
shrinks of main.py, the zeroing of unused prototypes after training, the schedules, the maps."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from benchmark.run.training import make_optimizer, run_epoch, total_loss
from methods.base import Stage
from methods.pipnet.functional import (
    align_loss,
    clamp_for_inference,
    class_loss,
    scoring_sheet,
    tanh_loss,
    unused_prototypes,
)
from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData

J = 2


def _method(source: SyntheticTokens, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_method("pipnet", source.context(J), **overrides)


def _stage(method, name: str) -> Stage:
    return next(s for s in method.stages() if s.name == name)


# ---- the reference: the official code's computations, on its own layout ------------------------
def _as_image(tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """B×N×D tokens → the B×D×H×W feature map a ConvNeXt backbone hands the add-on."""
    B, _, D = tokens.shape
    return tokens.transpose(1, 2).reshape(B, D, *grid)


def reference_forward(x: torch.Tensor, method, inference: bool = False):
    """pipnet.py ``forward``: add-on = Conv1×1 + Softmax(dim=1); AdaptiveMaxPool2d(1) + Flatten;
    NonNegLinear; inference zeroes pooled scores < 0.1."""
    conv_weight = method.add_on.weight[:, :, None, None]
    proto_features = torch.softmax(F.conv2d(x, conv_weight, method.add_on.bias), dim=1)
    pooled = F.adaptive_max_pool2d(proto_features, 1).flatten(1)
    if inference:
        pooled = torch.where(pooled < 0.1, 0.0, pooled)
    out = F.linear(pooled, torch.relu(method.weight), method.bias)
    return proto_features, pooled, out


def reference_align(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    assert not targets.requires_grad  # train.py: align_loss asserts a detached target
    return -torch.log(torch.einsum("nc,nc->n", inputs, targets) + 1e-12).mean()


def reference_loss(proto_features, pooled, out, ys1, *, align_w, t_w, cl_w, m, pretrain, finetune):
    """train.py ``calculate_loss`` with EPS = 1e-8 (the value train.py passes): the two views
    are the two halves of the batch."""
    ys = torch.cat([ys1, ys1])
    pooled1, pooled2 = pooled.chunk(2)
    pf1, pf2 = proto_features.chunk(2)
    emb2 = pf2.flatten(start_dim=2).permute(0, 2, 1).flatten(end_dim=1)
    emb1 = pf1.flatten(start_dim=2).permute(0, 2, 1).flatten(end_dim=1)
    a_loss = (reference_align(emb1, emb2.detach()) + reference_align(emb2, emb1.detach())) / 2
    t_loss = -(torch.log(torch.tanh(pooled1.sum(0)) + 1e-8).mean() + torch.log(torch.tanh(pooled2.sum(0)) + 1e-8).mean()) / 2
    parts = {"align": a_loss, "tanh": t_loss}
    loss = torch.zeros(())
    if not finetune:
        loss = align_w * a_loss + t_w * t_loss
    if not pretrain:
        c_loss = F.nll_loss(F.log_softmax(torch.log1p(out ** m), dim=1), ys)
        parts["ce"] = c_loss
        loss = cl_w * c_loss if finetune else loss + cl_w * c_loss
    return loss, parts


# ---- forward ---------------------------------------------------------------------------------------
def test_forward_logits_and_maps_equal_the_official_forward() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = _method(source).eval()
    with torch.no_grad():
        method.weight[0, :3] = torch.tensor([-0.5, 0.0, 2.0])  # negative weights act as 0
    batch = source.batch(torch.arange(8))
    with torch.no_grad():
        z, pooled, out = reference_forward(_as_image(batch.tokens, batch.grid), method, inference=True)
        logits, maps = method.logits(batch), method.activation_maps(batch, batch.labels)
        presence = method.presence_maps(batch)
    assert torch.allclose(presence.sum(dim=1), torch.ones(8, 36), atol=1e-6)
    assert (presence.view_as(z) - z).abs().max() < 1e-6
    assert (logits - out).abs().max() < 1e-6
    chosen = method.class_prototypes(batch.labels)
    expected = torch.stack([torch.relu(method.weight[batch.labels[b], chosen[b], None, None]) * z[b, chosen[b]]
                            for b in range(8)])
    assert (maps - expected).abs().max() < 1e-6


def test_inference_clamp_keeps_exactly_a_tenth_and_negative_weights_count_as_zero() -> None:
    pooled = torch.tensor([[0.0999, 0.1, 0.5, 0.0]])
    kept = clamp_for_inference(pooled)
    assert kept.tolist() == [[0.0, pytest.approx(0.1), 0.5, 0.0]]
    assert torch.equal(kept, torch.where(pooled < 0.1, 0.0, pooled))
    weight = torch.tensor([[-1.0, 2.0, -3.0, 1.0]])
    assert scoring_sheet(kept, weight, None).item() == pytest.approx(0.2)


def test_contributions_sum_to_the_logit_when_j_covers_the_nonzero_weights() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = _method(source).eval()
    with torch.no_grad():
        method.weight.zero_()
        for c in range(3):  # class c uses prototypes 2c and 2c + 1 only
            method.weight[c, 2 * c:2 * c + 2] = torch.tensor([0.5, 1.5])
        method.add_on.weight.mul_(20)  # peaked presences: pooled scores above the 0.1 clamp
    batch = source.batch(torch.arange(12))
    with torch.no_grad():
        logits = method.logits(batch)
        contributions = method.prototype_contributions(batch, batch.labels)
    rows = torch.arange(12)
    assert (contributions.sum(1) - logits[rows, batch.labels]).abs().max() < 1e-6
    assert bool((logits[rows, batch.labels] > 0).any())
    assert method.class_prototypes(torch.tensor([1])).tolist() == [[3, 2]]  # descending weight


# ---- loss terms ------------------------------------------------------------------------------------
def _two_views(source, method):
    batch = source.batch(torch.arange(8))
    x1 = _as_image(batch.tokens, batch.grid)
    x2 = x1 + 0.3 * torch.randn(x1.shape, generator=torch.Generator().manual_seed(3))
    return batch, x1, x2


def test_each_loss_term_equals_calculate_loss_on_two_different_views() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = _method(source)
    batch, x1, x2 = _two_views(source, method)
    z, pooled, out = reference_forward(torch.cat([x1, x2]), method)
    _, parts = reference_loss(z, pooled, out, batch.labels, align_w=5, t_w=2, cl_w=2, m=2.0, pretrain=False,
                              finetune=False)
    B, P = 8, z.shape[1]
    z1, z2 = z[:B].reshape(B, P, -1), z[B:].reshape(B, P, -1)
    mine = {"align": align_loss(z1, z2), "tanh": tanh_loss(pooled[:B], pooled[B:]),
            "ce": class_loss(out, torch.cat([batch.labels, batch.labels]), 2.0)}
    for name in ("align", "tanh", "ce"):
        assert abs(float((mine[name] - parts[name]).detach())) < 1e-6, name


def test_align_gradient_flows_only_through_each_terms_first_view() -> None:
    P, N = 4, 3
    z1 = torch.softmax(torch.randn(2, P, N), dim=1).requires_grad_(True)
    z2 = torch.softmax(torch.randn(2, P, N), dim=1)
    z2[0, :, 0] = torch.tensor([0.0, 0.0, 0.0, 1.0])  # ⟨u, v⟩ = 0 at one row: log(1e-12)
    z1.data[0, :, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    z2.requires_grad_(True)
    ours = align_loss(z1, z2)
    ref = (reference_align(z1.permute(0, 2, 1).flatten(end_dim=1), z2.detach().permute(0, 2, 1).flatten(end_dim=1))
           + reference_align(z2.permute(0, 2, 1).flatten(end_dim=1), z1.detach().permute(0, 2, 1).flatten(end_dim=1))) / 2
    assert abs(float((ours - ref).detach())) < 1e-5 and float(ours.detach()) > -math.log(1e-12) / 6 - 1e-3
    (g1, g2) = torch.autograd.grad(ours, (z1, z2))
    (r1, r2) = torch.autograd.grad(ref, (z1, z2))
    assert (g1 - r1).abs().max() < 1e-3 * r1.abs().max() and (g2 - r2).abs().max() < 1e-3 * r2.abs().max()


def test_tanh_loss_sums_over_the_batch_and_uses_eps_1e_8() -> None:
    pooled = torch.rand(5, 4)
    pooled[:, 2] = 0.0  # a prototype absent everywhere: log(tanh(0) + 1e-8)
    expected = -(torch.log(torch.tanh(pooled.sum(0)) + 1e-8).mean())
    assert abs(float(tanh_loss(pooled, pooled) - expected)) < 1e-6
    assert abs(float(tanh_loss(pooled, pooled)) - float(-torch.log(torch.tanh(pooled.sum(0)[[0, 1, 3]])).sum()
                                                        - math.log(1e-8)) / 4) < 1e-5
    assert abs(float(tanh_loss(pooled[:2], pooled[:2]) - tanh_loss(pooled, pooled))) > 1e-3  # depends on B


@pytest.mark.parametrize("stage_name, epoch", [("pretrain", 0), ("pretrain", 4), ("finetune", 10), ("joint", 13)])
def test_weighted_loss_of_each_stage_equals_the_official_total(stage_name: str, epoch: int) -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = _method(source)
    batch = source.batch(torch.arange(8))
    stage = _stage(method, stage_name)
    terms = method.loss_terms(batch, stage, epoch)
    ours = total_loss(method, terms, stage, epoch)
    x = _as_image(batch.tokens, batch.grid)
    z, pooled, out = reference_forward(torch.cat([x, x]), method)  # two identical views
    pretrain, finetune = stage_name == "pretrain", stage_name == "finetune"
    expected, _ = reference_loss(z, pooled, out, batch.labels, align_w=(epoch + 1) / 10 if pretrain else 5.0,
                                 t_w=5.0 if pretrain else 2.0, cl_w=0.0 if pretrain else 2.0, m=2.0,
                                 pretrain=pretrain, finetune=finetune)
    assert abs(float((ours - expected).detach())) < 1e-5
    assert set(terms) == {"pretrain": {"align_pre", "tanh_pre"}, "finetune": {"ce"},
                          "joint": {"align", "tanh", "ce"}}[stage_name]


def test_view_dropout_draws_two_views_for_the_official_loss() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = _method(source, view_dropout=0.2)
    batch = source.batch(torch.arange(8))
    stage = _stage(method, "joint")
    torch.manual_seed(5)
    ours = total_loss(method, method.loss_terms(batch, stage, 13), stage, 13)
    torch.manual_seed(5)
    x1 = _as_image(F.dropout(batch.tokens, 0.2, training=True), batch.grid)
    x2 = _as_image(F.dropout(batch.tokens, 0.2, training=True), batch.grid)
    z, pooled, out = reference_forward(torch.cat([x1, x2]), method)
    expected, parts = reference_loss(z, pooled, out, batch.labels, align_w=5.0, t_w=2.0, cl_w=2.0, m=2.0,
                                     pretrain=False, finetune=False)
    assert abs(float((ours - expected).detach())) < 1e-5 and float(parts["align"].detach()) > 0


# ---- one optimiser step and the shrink hook ---------------------------------------------------------
@pytest.mark.parametrize("stage_name, epoch", [("pretrain", 0), ("finetune", 10), ("joint", 13)])
def test_one_step_equals_adamw_steps_then_the_shrink(stage_name: str, epoch: int) -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = _method(source)
    reference = _method(source)
    stage = _stage(method, stage_name)
    order = torch.arange(8)
    optimizer = make_optimizer(stage)
    run_epoch(method, source, stage, optimizer, order, batch_size=8, device=torch.device("cpu"), epoch=epoch)

    # the official step: both views, calculate_loss, AdamW(wd 0) on the classifier and on the net
    # (the net not while fine-tuning, the classifier not while pretraining), then the shrink
    pretrain, finetune = stage_name == "pretrain", stage_name == "finetune"
    net = [reference.add_on.weight, reference.add_on.bias]
    opt_net = torch.optim.AdamW(net, lr=5e-3, weight_decay=0.0)
    opt_cls = torch.optim.AdamW([reference.weight], lr=0.05, weight_decay=0.0)
    for p in net:
        p.requires_grad_(not finetune)
    reference.weight.requires_grad_(not pretrain)
    batch = source.batch(order)
    x = _as_image(batch.tokens, batch.grid)
    z, pooled, out = reference_forward(torch.cat([x, x]), reference)
    loss, _ = reference_loss(z, pooled, out, batch.labels, align_w=(epoch + 1) / 10 if pretrain else 5.0,
                             t_w=5.0 if pretrain else 2.0, cl_w=0.0 if pretrain else 2.0, m=2.0,
                             pretrain=pretrain, finetune=finetune)
    loss.backward()
    if not pretrain:
        opt_cls.step()
    if not finetune:
        opt_net.step()
    if not pretrain:
        with torch.no_grad():
            reference.weight.copy_(torch.clamp(reference.weight - 1e-3, min=0.0))
    for name in ("add_on.weight", "add_on.bias", "weight"):
        ours, theirs = dict(method.named_parameters())[name], dict(reference.named_parameters())[name]
        assert (ours - theirs).abs().max() < 1e-6, name
    moved = (method.weight - _method(source).weight).abs().max()
    assert (moved > 0) == (not pretrain)


def test_shrink_subtracts_1e_3_from_every_weight_and_clamps_the_bias() -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    method = _method(source, bias=True)
    with torch.no_grad():
        method.weight.zero_()
        method.weight[0, :3] = torch.tensor([0.0005, 0.002, 1.0])
        method.bias.copy_(torch.tensor([-0.3, 0.2]))
    method.after_step(source.batch(torch.arange(2)), _stage(method, "joint"), 13)
    assert method.weight[0, :3].tolist() == pytest.approx([0.0, 0.001, 0.999], abs=1e-7)
    assert method.bias.tolist() == pytest.approx([0.0, 0.2]) and float(method.multiplier) == 2.0
    before = method.weight.clone()
    method.after_step(source.batch(torch.arange(2)), _stage(method, "pretrain"), 0)  # no shrink while pretraining
    assert torch.equal(before, method.weight)


@pytest.mark.parametrize("epochs, finetune", [(60, 3), (35, 3), (1, 0), (4, 0)])
def test_epoch_shrinks_happen_where_main_py_applies_them(epochs: int, finetune: int) -> None:
    """Hooks in the training loop's order (stage start, then epoch ends) against main.py's loop:
    ``for epoch in 1..epochs: if (epoch == epochs or epoch % 30 == 0) and epochs > 1: shrink``."""
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    method = _method(source, pretrain_epochs=2, epochs=epochs, finetune_epochs=finetune)
    with torch.no_grad():
        method.weight.fill_(1.0)
    method.zero_unused = lambda data: None  # the last epoch's pass is tested below
    data = SyntheticTrainData(source)
    epoch = 0
    for stage in method.stages():
        if stage.epochs == 0:
            continue
        method.on_stage_start(stage, epoch, data)
        for _ in range(stage.epochs):
            method.on_epoch_end(stage, epoch, data)
            epoch += 1
    official = sum(1 for e in range(1, epochs + 1) if (e == epochs or e % 30 == 0) and epochs > 1)
    assert float(method.weight[0, 0]) == pytest.approx(1.0 - 1e-3 * official, abs=1e-6)


def test_test_batch_shrinks_are_an_option() -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    method = _method(source, pretrain_epochs=1, epochs=5, finetune_epochs=1, test_shrinks_per_epoch=3)
    with torch.no_grad():
        method.weight.fill_(1.0)
    method.on_epoch_end(_stage(method, "joint"), 2, SyntheticTrainData(source))  # stage-2 epoch 2 of 5
    assert float(method.weight[0, 0]) == pytest.approx(1.0 - 3e-3, abs=1e-6)


def test_zeroing_after_training_equals_the_top10_rule_of_main_py() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=6)
    method = _method(source, num_prototypes=32, pretrain_epochs=1, epochs=2, finetune_epochs=1).eval()
    with torch.no_grad():
        method.weight[:, 0] = 1e-3  # irrelevant (max_c W ≤ 1e-3): left alone whatever its presence
    data = SyntheticTrainData(source, batch_size=5)
    # reference: visualize_topk's top-10 clamped pooled scores per relevant prototype, zeroed unless one > 0.1
    with torch.no_grad():
        _, pooled, _ = reference_forward(_as_image(source.tokens, source.grid), method, inference=True)
    expected = method.weight.detach().clone()
    relevant = expected.amax(dim=0) > 1e-3
    for p in range(expected.shape[1]):
        if expected[:, p].max() > 1e-3 and not bool((pooled[:, p].topk(10).values > 0.1).any()):
            expected[:, p] = 0.0
    method.on_epoch_end(_stage(method, "joint"), 2, data)  # the last stage-2 epoch (no shrink before it)
    assert torch.equal(method.weight, expected)
    assert torch.equal(method.zeroed, relevant & (expected == 0).all(dim=0))
    assert 0 < int(method.zeroed.sum()) < expected.shape[1] - 1


def test_unused_rule_at_the_threshold() -> None:
    weight = torch.tensor([[1.0, 1.0, 1e-3, 0.5]])
    max_pooled = torch.tensor([0.1, 0.1001, 0.0, 0.05])
    assert unused_prototypes(max_pooled, weight).tolist() == [True, False, False, True]


# ---- schedules ---------------------------------------------------------------------------------------
def _lrs(stage: Stage) -> list[list[float]]:
    optimizer = make_optimizer(stage)
    scheduler = stage.scheduler(optimizer)
    out = []
    for _ in range(stage.epochs):
        out.append([g["lr"] for g in optimizer.param_groups])
        optimizer.step()
        scheduler.step()
    return out


def test_schedules_are_the_official_per_iteration_curves_at_each_epochs_centre() -> None:
    """Two iterations per epoch: the centre of epoch k is iteration 2k + 1 of the official curve."""
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    method = _method(source, pretrain_epochs=4, epochs=12, finetune_epochs=3)
    probe = torch.nn.Parameter(torch.zeros(1))

    def cosine(lr: float, total_iters: int, eta: float, steps: int) -> float:
        opt = torch.optim.SGD([probe], lr=lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total_iters, eta_min=eta)
        for _ in range(steps):
            opt.step()
            sched.step()
        return opt.param_groups[0]["lr"]

    def restarts(lr: float, t: float) -> float:
        opt = torch.optim.SGD([probe], lr=lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=5, eta_min=1e-3, T_mult=1)
        sched.step(t)
        return opt.param_groups[0]["lr"]

    pretrain = _lrs(_stage(method, "pretrain"))
    assert [lr[0] for lr in pretrain] == pytest.approx([cosine(5e-3, 8, 5e-6, 2 * k + 1) for k in range(4)], rel=1e-9)
    finetune = _lrs(_stage(method, "finetune"))
    assert [lr[0] for lr in finetune] == pytest.approx([restarts(0.05, k + 0.5) for k in range(3)], rel=1e-9)
    joint = _lrs(_stage(method, "joint"))
    assert [lr[0] for lr in joint] == pytest.approx([restarts(0.05, 3 + k + 0.5) for k in range(9)], rel=1e-9)
    assert [lr[1] for lr in joint] == pytest.approx([cosine(5e-3, 24, 5e-6, 2 * k + 1) for k in range(9)], rel=1e-9)


def test_bad_hyperparameters_are_refused_by_name() -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    for overrides, word in (({"finetune_epochs": 5, "epochs": 3}, "finetune_epochs"),
                            ({"view_dropout": 1.0}, "view_dropout"), ({"num_prototypes": 1}, "num_prototypes")):
        with pytest.raises(ValueError, match=word):
            _method(source, **overrides)


def test_without_pretraining_there_is_no_fine_tuning_as_in_main_py() -> None:
    """main.py fine-tunes (classifier only) in the first 3 epochs only ``if args.epochs_pretrain > 0
    or a state dict is given``: with pretrain_epochs = 0 every stage-2 epoch is joint, its
    classifier restarts and net cosine starting at the first epoch."""
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    stages = {s.name: s.epochs for s in _method(source, pretrain_epochs=0, epochs=6, finetune_epochs=3).stages()}
    assert stages == {"pretrain": 0, "finetune": 0, "joint": 6}
    pretrained = {s.name: s.epochs for s in _method(source, pretrain_epochs=1, epochs=6, finetune_epochs=3).stages()}
    assert pretrained == {"pretrain": 1, "finetune": 3, "joint": 3}
