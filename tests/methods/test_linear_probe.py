"""Linear probe adapter against a re-statement of DINOv2's linear evaluation
(``facebookresearch/dinov2`` @ 05c66df, ``dinov2/eval/linear.py``): ``create_linear_input`` with one
block (CLS, optionally concatenated with the patch mean), ``LinearClassifier``'s init, and the
training loop of ``eval_linear`` (cross-entropy, SGD momentum 0.9 / weight decay 0, per-iteration
``CosineAnnealingLR(max_iter, eta_min=0)``), run through the harness's own epoch loop; the map."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from benchmark.run.schedules import make_optimizer, make_scheduler
from benchmark.run.training import run_epoch
from methods.registry import build_method
from methods.testing import SyntheticTokens

J = 2


def _probe(source: SyntheticTokens, seed: int = 0, **overrides) -> nn.Module:
    torch.manual_seed(seed)
    return build_method("linear_probe", source.context(J, seed=seed), **overrides)


def official_tokens(source: SyntheticTokens, rows: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``get_intermediate_layers(n=1, return_class_token=True, norm=True)``: the final norm of the
    last block's output, split into (patch tokens, class token); SyntheticTokens' norm is an
    affine-free LayerNorm."""
    normed = nn.functional.layer_norm(source.block_input[rows].double(), (source.dim,))
    return [(normed[:, 1:], normed[:, 0])]


def official_linear_input(x_tokens_list, use_n_blocks: int, use_avgpool: bool) -> torch.Tensor:
    """``create_linear_input``: the class tokens of the last n blocks, then the mean of the last
    block's patch tokens when ``use_avgpool``."""
    chosen = x_tokens_list[-use_n_blocks:]
    output = torch.cat([class_token for _, class_token in chosen], dim=-1)
    if use_avgpool:
        output = torch.cat((output, chosen[-1][0].mean(dim=1)), dim=-1)
    return output


@pytest.mark.parametrize("pool, avgpool", [("cls", False), ("cls+mean", True)])
def test_logits_equal_the_official_linear_classifier(pool: str, avgpool: bool) -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    probe = _probe(source, pool=pool).eval()
    rows = torch.arange(len(source))
    reference = nn.Linear(probe.linear.in_features, source.num_classes).double()
    reference.load_state_dict({k: v.double() for k, v in probe.linear.state_dict().items()})
    expected = reference(official_linear_input(official_tokens(source, rows), 1, avgpool))
    with torch.no_grad():
        ours = probe.logits(source.batch(rows))
    assert (ours.double() - expected).abs().max() < 1e-5


def test_initialisation_is_the_official_normal_and_zero_bias() -> None:
    """``LinearClassifier.__init__``: ``weight.data.normal_(mean=0.0, std=0.01)``, ``bias.data.zero_()``:
    the same draws from the same RNG state."""
    source = SyntheticTokens(num_classes=4, images_per_class=6, dim=64)
    probe = _probe(source, seed=5)
    torch.manual_seed(11)
    expected = torch.empty(4, 128).normal_(mean=0.0, std=0.01)
    torch.manual_seed(11)
    probe.reset_head()
    assert torch.equal(probe.linear.weight.detach(), expected)
    assert torch.equal(probe.linear.bias.detach(), torch.zeros(4))


def test_training_equals_the_official_sgd_cosine_loop() -> None:
    """Two epochs through the harness's run_epoch with the stage's optimiser and per-step
    schedule against ``eval_linear``'s loop on the same batches, from the same initial weights."""
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    epochs, batch_size, lr = 3, 7, 0.05
    probe = _probe(source, epochs=epochs, lr=lr)
    reference = nn.Linear(probe.linear.in_features, source.num_classes).double()
    reference.load_state_dict({k: v.double() for k, v in probe.linear.state_dict().items()})

    stage = probe.stages()[0]
    optimizer = make_optimizer(stage)
    order = torch.arange(len(source))
    steps_per_epoch = math.ceil(len(order) / batch_size)
    scheduler = make_scheduler(stage, optimizer, steps_per_epoch)
    for epoch in range(epochs):
        run_epoch(probe, source, stage, optimizer, order, batch_size=batch_size, device=torch.device("cpu"),
                  epoch=epoch, prefetch=0, step_scheduler=scheduler)

    official_optimizer = torch.optim.SGD(reference.parameters(), lr=lr, momentum=0.9, weight_decay=0)
    official_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(official_optimizer, epochs * steps_per_epoch,
                                                                    eta_min=0)
    for _ in range(epochs):
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            logits = reference(official_linear_input(official_tokens(source, rows), 1, True))
            loss = nn.CrossEntropyLoss()(logits, source.labels[rows])
            official_optimizer.zero_grad()
            loss.backward()
            official_optimizer.step()
            official_scheduler.step()
    assert (probe.linear.weight.detach().double() - reference.weight.detach()).abs().max() < 1e-5
    assert (probe.linear.bias.detach().double() - reference.bias.detach()).abs().max() < 1e-5
    assert optimizer.param_groups[0]["lr"] == pytest.approx(official_optimizer.param_groups[0]["lr"], abs=1e-12)


@pytest.mark.parametrize("pool", ["cls", "mean", "cls+mean"])
def test_map_is_the_per_patch_class_logit(pool: str) -> None:
    """Loop oracle: the classifier applied to the feature with patch token n in place of the
    pooled patches (CLS for ``cls``); for the pools with a mean, its mean over patches is the logit."""
    source = SyntheticTokens(num_classes=4, images_per_class=3)
    probe = _probe(source, pool=pool).eval()
    batch = source.batch(torch.arange(6))
    classes = (batch.labels + 1) % 4
    with torch.no_grad():
        maps = probe.activation_maps(batch, classes)
        logits = probe.logits(batch)
    W, b = probe.linear.weight.double(), probe.linear.bias.double()
    normed = nn.functional.layer_norm(batch.block_input.double(), (source.dim,))
    expected = torch.zeros(6, normed.shape[1] - 1, dtype=torch.float64)
    for i in range(6):
        for n in range(expected.shape[1]):
            patch = normed[i, 1 + n]
            feature = {"cls": patch, "mean": patch, "cls+mean": torch.cat([normed[i, 0], patch])}[pool]
            expected[i, n] = W[classes[i]] @ feature + b[classes[i]]
    assert maps.shape == (6, J, *source.grid) and torch.equal(maps[:, 0], maps[:, 1])
    assert (maps[:, 0].flatten(1).double() - expected).abs().max() < 1e-5
    if pool != "cls":
        rows = torch.arange(6)
        assert (maps[:, 0].flatten(1).mean(dim=1) - logits[rows, classes]).abs().max() < 1e-5


def test_a_cls_pool_on_a_trunk_without_cls_is_refused_naming_the_fix() -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    ctx = source.context(J)
    from dataclasses import replace
    with pytest.raises(ValueError, match='pool = "mean"'):
        build_method("linear_probe", replace(ctx, has_cls_attention=False, backbone="siglip"))
    assert build_method("linear_probe", replace(ctx, has_cls_attention=False), pool="mean").pool == "mean"
