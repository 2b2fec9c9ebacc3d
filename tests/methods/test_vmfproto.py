"""The vMFProto adapter: contract, stages, ablation switches, the equations of the logits, maps
and L_ppd, stage-1 momentum, determinism, and a training smoke test on synthetic tokens."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods.base import MethodContext, Stage, TokenBatch, TrainData
from methods.common.ot import hard_assignment, sinkhorn_log
from methods.contract import check_method
from methods.diagnostics import collect_diagnostics
from methods.registry import build_method, method_hyperparameters
from methods.vmfproto import VMFProto, log_vmf_normaliser


class IdentityNormBlock(nn.Module):
    """Stand-in for the appended block: zero-initialised residual Linear, then LayerNorm;
    B×(P+N)×D → B×N×D (prefix dropped). The identity (up to the norm) at initialisation."""

    def __init__(self, dim: int, prefix: int) -> None:
        super().__init__()
        self.prefix = prefix
        self.proj = nn.Linear(dim, dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.proj.parameters())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.proj(x))[:, self.prefix :]


class DropPrefix(nn.Module):
    """A parameter-free block for hand-computed examples: T = the patch tokens themselves."""

    def __init__(self, prefix: int) -> None:
        super().__init__()
        self.prefix = prefix

    def trainable_parameters(self) -> list[nn.Parameter]:
        return []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.prefix :]


def _context(classes: int, per_class: int, dim: int, grid: tuple[int, int], block: str = "norm",
             seed: int = 0) -> MethodContext:
    prefix = 1
    make = (lambda: IdentityNormBlock(dim, prefix)) if block == "norm" else (lambda: DropPrefix(prefix))
    return MethodContext(classes, per_class, dim, grid, prefix, depth=4, make_block=make, seed=seed)


class SyntheticParts:
    """Class-separable, DINO-like tokens: a foreground patch (the middle rows of the grid) is a
    shared "object" direction plus one of the J part directions of the image's class, a
    background patch a shared "background" direction plus one of three clutter directions;
    the CLS attention is peaked on the foreground."""

    def __init__(self, classes: int, parts: int, dim: int, grid: tuple[int, int], seed: int) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.parts = F.normalize(torch.randn(classes, parts, dim, generator=self.g), dim=-1)
        self.clutter = F.normalize(torch.randn(3, dim, generator=self.g), dim=-1)
        self.object, self.background = F.normalize(torch.randn(2, dim, generator=self.g), dim=-1)
        self.grid = grid
        height, width = grid
        fg = torch.zeros(height, width, dtype=torch.bool)
        fg[height // 4 : height - height // 4] = True
        self.fg = fg.flatten()

    def batch(self, labels: list[int]) -> TokenBatch:
        y = torch.tensor(labels)
        b, n, (_, j, d) = len(labels), self.fg.numel(), self.parts.shape
        part = 3.0 * self.object + 2.0 * self.parts[y.unsqueeze(-1), torch.randint(j, (b, n), generator=self.g)]
        clutter = 3.0 * self.background + 2.0 * self.clutter[torch.randint(3, (b, n), generator=self.g)]
        patches = torch.where(self.fg.view(1, n, 1), part, clutter) + 0.3 * torch.randn(b, n, d, generator=self.g)
        block_input = torch.cat([torch.randn(b, 1, d, generator=self.g), patches], dim=1)
        attention = torch.where(self.fg, 1.0, 0.1) + 0.05 * torch.rand(b, n, generator=self.g)
        tokens = F.layer_norm(patches, (d,))  # the frozen final-norm view
        return TokenBatch(tokens, block_input, attention, y, torch.arange(b), self.grid)


def test_adapter_contract() -> None:
    check_method("vmfproto", prototypes_per_class=2)


def test_registry_signature_and_validation() -> None:
    ctx = _context(3, 2, 8, (2, 2))
    assert isinstance(build_method("vmfproto", ctx), VMFProto)
    assert method_hyperparameters(VMFProto) == {
        "gating": "attention_pca", "tau": 0.5, "gamma": 0.99, "ot_epsilon": 0.05, "ot_iterations": 10,
        "ot_tolerance": None, "ot_max_iterations": 1000,
        "lambda_ppd": 0.8, "lambda_logdet": 1.0, "logdet_delta": 1e-4, "kappa_init": 5.0, "mu_init": "patches",
        "fixed_kappa": None, "stage2_prototypes": True, "discovery_epochs": 1, "end_to_end_epochs": 19,
        "lr_block": 1e-4, "lr_mu": 5e-4, "lr_kappa": 1.2e-3, "lr_pi": 1e-5,
    }
    bad = [
        ("gating", "saliency"), ("tau", 1.5), ("tau", -0.1), ("gamma", 1.0), ("ot_epsilon", 0.0),
        ("ot_iterations", 0), ("lambda_ppd", -1.0), ("kappa_init", 0.0), ("mu_init", "kmeans"),
        ("fixed_kappa", -5.0), ("discovery_epochs", -1), ("end_to_end_epochs", 2.5), ("lr_mu", 0.0),
    ]
    for name, value in bad:
        with pytest.raises((ValueError, TypeError), match=name):
            build_method("vmfproto", ctx, **{name: value})


def test_stages_and_ablation_switches() -> None:
    ctx = _context(3, 2, 8, (2, 2))
    discovery, end_to_end = build_method("vmfproto", ctx).stages()
    assert (discovery.name, discovery.epochs, discovery.trains) == ("discovery", 1, False)
    assert (end_to_end.name, end_to_end.epochs, end_to_end.optimizer) == ("end_to_end", 19, "adam")
    assert {g.name: g.lr for g in end_to_end.param_groups} == {"block": 1e-4, "mu": 5e-4, "kappa": 1.2e-3, "pi": 1e-5}

    frozen = build_method("vmfproto", ctx, stage2_prototypes=False)
    assert [g.name for g in frozen.stages()[1].param_groups] == ["block"]

    fixed = build_method("vmfproto", ctx, fixed_kappa=1.0, kappa_init=7.0)
    assert [g.name for g in fixed.stages()[1].param_groups] == ["block", "mu", "pi"]
    assert torch.allclose(fixed.kappa, torch.ones(3, 2))

    only_ce = build_method("vmfproto", ctx, lambda_ppd=0.0, lambda_logdet=0.0, discovery_epochs=0)
    assert [s.name for s in only_ce.stages()] == ["end_to_end"]
    data = SyntheticParts(3, 2, 8, (2, 2), seed=0)
    assert set(only_ce.loss_terms(data.batch([0, 1, 2]), only_ce.stages()[0], 0)) == {"ce"}
    full = build_method("vmfproto", ctx)
    terms = full.loss_terms(data.batch([0, 1, 2, 2]), full.stages()[1], 1)
    assert set(terms) == {"ce", "ppd", "logdet"} and all(torch.isfinite(v) for v in terms.values())
    assert full.loss_terms(data.batch([0, 1]), full.stages()[0], 0) == {}


def _one_image(patches: torch.Tensor) -> TokenBatch:
    """A class-0 image whose block input is a zero CLS token followed by ``patches`` (N×D)."""
    block_input = torch.cat([torch.zeros(1, 1, patches.shape[1]), patches.unsqueeze(0)], 1)
    n = patches.shape[0]
    return TokenBatch(patches.unsqueeze(0), block_input, torch.ones(1, n), torch.tensor([0]), torch.tensor([0]), (1, n))


def test_stage1_momentum_hand_example() -> None:
    gamma = 0.9
    ctx = _context(2, 2, 3, (1, 4), block="plain")
    model = build_method("vmfproto", ctx, gating="none", mu_init="random", gamma=gamma)
    e = torch.eye(3)
    with torch.no_grad():
        model.mu.copy_(torch.stack([e[:2], e[1:]]))  # class 0: μ = (e0, e1); class 1: (e1, e2)
    mu_class1 = model.prototype_means()[1].clone()
    t = F.normalize(torch.tensor([[1.0, 0.2, 0.0], [1.0, -0.1, 0.3], [0.1, 1.0, 0.0], [-0.2, 1.0, 0.2]]), dim=-1)
    batch = _one_image(t)
    model.after_step(batch, Stage("discovery", 1), 0)
    f0, f1 = F.normalize(t[0] + t[1], dim=0), F.normalize(t[2] + t[3], dim=0)  # OT puts 2 patches on each
    expected = F.normalize(torch.stack([gamma * e[0] + (1 - gamma) * f0, gamma * e[1] + (1 - gamma) * f1]), dim=-1)
    torch.testing.assert_close(model.prototype_means()[0], expected)
    torch.testing.assert_close(model.prototype_means()[1], mu_class1)  # class 1 absent: unchanged

    # patches all near component 0 and π_0 = (0.98, 0.02): every hard label is 0, so
    # component 1 has no patch and keeps its μ
    with torch.no_grad():
        model.alpha[0] = torch.tensor([2.0, -2.0])
    t = F.normalize(torch.tensor([[1.0, 0.2, 0.0], [1.0, -0.1, 0.3], [1.0, 0.0, -0.2], [1.0, 0.1, 0.1]]), dim=-1)
    batch = _one_image(t)
    before = model.prototype_means()[0].clone()
    model.after_step(batch, Stage("discovery", 1), 0)
    after = model.prototype_means()[0]
    torch.testing.assert_close(after[1], before[1])
    f_all = F.normalize(t.sum(0), dim=0)
    torch.testing.assert_close(after[0], F.normalize(gamma * before[0] + (1 - gamma) * f_all, dim=0))


def test_mu_from_patches_and_resume_determinism() -> None:
    ctx = _context(3, 2, 16, (4, 4), seed=5)
    data = SyntheticParts(3, 2, 16, (4, 4), seed=1)
    first, second = data.batch([0, 0, 1]), data.batch([2, 1, 0])
    stage = Stage("discovery", 1)
    model = build_method("vmfproto", ctx, gamma=0.999)
    model.after_step(first, stage, 0)
    assert model.seen.tolist() == [True, True, False]
    tokens = model.trainable_tokens(first).detach()
    mask = model.foreground(first)
    for c in (0, 1):  # each μ sits on a distinct foreground patch of its own class
        own = tokens[first.labels == c][mask[first.labels == c]]
        cosine = model.prototype_means()[c].detach() @ own.T
        nearest = cosine.argmax(-1)
        assert cosine.max(-1).values.min() > 0.99 and nearest[0] != nearest[1]

    saved = {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    saved["_extra_state"] = model.state_dict()["_extra_state"]
    resumed = build_method("vmfproto", ctx, gamma=0.999)
    resumed.load_state_dict(saved)
    assert resumed.seen.tolist() == [True, True, False]
    model.after_step(second, stage, 0)
    resumed.after_step(second, stage, 0)  # class 2 is new: the generator must be where it was
    assert torch.equal(model.mu, resumed.mu)
    replay = build_method("vmfproto", ctx, gamma=0.999)
    replay.after_step(first, stage, 0)
    replay.after_step(second, stage, 0)
    assert torch.equal(model.mu, replay.mu)


class BatchList(TrainData):
    """A split given as a list of batches (``batch_size`` is ignored)."""

    def __init__(self, *batches: TokenBatch) -> None:
        self.list = batches

    def __len__(self) -> int:
        return sum(len(b) for b in self.list)

    def batches(self, batch_size: int, *, shuffle: bool = False):  # noqa: ANN201
        yield from self.list


def test_gating_fallbacks_are_counted_once_per_image_per_split() -> None:
    model = build_method("vmfproto", _context(2, 2, 8, (2, 2)))
    # three training images: two constant ones (no foreground: they fall back to all patches)
    tokens = torch.cat([torch.ones(2, 4, 8), torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0))])
    attention = torch.tensor([[0.25] * 4, [0.25] * 4, [0.7, 0.1, 0.1, 0.1]])
    train = TokenBatch(tokens, torch.ones(3, 5, 8), attention, torch.tensor([0, 1, 1]), torch.arange(3), (2, 2))
    test = TokenBatch(tokens[2:], torch.ones(1, 5, 8), attention[2:], torch.tensor([1]), torch.arange(1), (2, 2))
    assert model.foreground(train)[:2].all()
    with torch.no_grad():  # what benchmark/run/explain.py does: two gated passes over the same images
        model.logits(train)
        model.prototype_contributions(train, train.labels)
    diagnostics = collect_diagnostics(model, {"train": BatchList(train), "test": BatchList(test)})
    assert diagnostics["gating_fallback_images"] == {"train": 2, "test": 0}
    kept = model.foreground(test)[0].float().mean().item()  # the image's own share of kept patches
    assert diagnostics["foreground_fraction"]["test"] == {"mean": kept, "min": kept}
    assert diagnostics["foreground_fraction"]["train"] == pytest.approx({"mean": (2 + kept) / 3, "min": kept})
    assert diagnostics["ot_marginal_error"] is None  # no OT ran
    assert diagnostics["kappa"] == pytest.approx({"min": 5.0, "median": 5.0, "max": 5.0})
    assert kept == 0.75
    assert diagnostics["warnings"] == ["gating_fallback_images.train = 2 > 0",
                                       "foreground_fraction.train.mean = 0.9167 > 0.9"]


def _sharp_model(kappa: float, **kwargs: object) -> tuple[VMFProto, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A model with κ = ``kappa`` and per-image own-class scores, foreground mask and labels of two
    batches' worth of patches, for the OT diagnostics."""
    dim, grid = 16, (3, 3)
    model = build_method("vmfproto", _context(3, 4, dim, grid, block="drop"), kappa_init=kappa, **kwargs)
    g = torch.Generator().manual_seed(4)
    tokens = F.normalize(torch.randn(6, 9, dim, generator=g), dim=-1)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    with torch.no_grad():
        scores = model.class_scores(tokens, labels)
    mask = torch.rand(6, 9, generator=g) > 0.3
    return model, scores, mask, labels


def _expected_errors(model: VMFProto, scores: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
                     iterations: int) -> list[float]:
    errors = []
    for c in labels.unique().tolist():
        rows = scores[labels == c][mask[labels == c]]
        pi = model.log_pi[c].detach().exp()
        plan = sinkhorn_log(rows, torch.full((len(rows),), 1.0 / len(rows)), pi, 0.05, iterations)
        errors.append(float((plan.sum(0) - pi).abs().sum()))
    return errors


def test_ot_marginal_error_is_recorded_over_the_latest_epoch_and_survives_a_checkpoint() -> None:
    model, scores, mask, labels = _sharp_model(50.0)
    model.ot_labels(scores, mask, labels, 0)
    model.ot_labels(scores[:4], mask[:4], labels[:4], 1)  # epoch 1 starts a new tally: classes 0, 1
    model.ot_labels(scores[2:], mask[2:], labels[2:], 1)  # classes 1, 2
    expected = _expected_errors(model, scores[:4], mask[:4], labels[:4], 10) + \
        _expected_errors(model, scores[2:], mask[2:], labels[2:], 10)
    diagnostics = collect_diagnostics(model, {})
    error = diagnostics["ot_marginal_error"]
    assert (error["epoch"], error["problems"], error["iterations"], error["tolerance"]) == (1, 4, 10, None)
    assert error["mean"] == pytest.approx(sum(expected) / 4, rel=1e-5)
    assert error["max"] == pytest.approx(max(expected), rel=1e-5)
    # far from converged at κ = 50: out of the expected range
    # far from converged at κ = 50: out of the range, which the paper's 10 iterations make expected
    assert error["mean"] > 0.1 and not any("ot_marginal_error" in w for w in diagnostics["warnings"])
    (explained,) = diagnostics["expected_warnings"]
    assert explained["warning"].startswith("ot_marginal_error.mean = ") and "Sinkhorn" in explained["why"]
    tolerant = build_method("vmfproto", model.ctx, kappa_init=50.0, ot_tolerance=1e-3)
    assert tolerant.expected_warnings() == {}  # iterating to a tolerance: out of range is a fault again
    restored = build_method("vmfproto", model.ctx, kappa_init=50.0)
    restored.load_state_dict(model.state_dict())
    assert collect_diagnostics(restored, {}) == diagnostics


def test_ot_tolerance_iterates_until_the_column_marginal_holds() -> None:
    model, scores, mask, labels = _sharp_model(20.0, ot_tolerance=1e-4)
    model.ot_labels(scores, mask, labels, 3)
    error = collect_diagnostics(model, {})["ot_marginal_error"]
    assert error["max"] <= 1e-4 and (error["iterations"], error["tolerance"]) == (None, 1e-4)
    assert min(_expected_errors(model, scores, mask, labels, 10)) > 100 * error["max"]
    with pytest.raises((ValueError, TypeError), match="ot_tolerance"):
        build_method("vmfproto", model.ctx, ot_tolerance=0.0)


def test_training_smoke_on_synthetic_tokens() -> None:
    torch.manual_seed(0)
    classes, per_class, dim, grid = 4, 2, 32, (4, 4)
    data = SyntheticParts(classes, per_class, dim, grid, seed=0)
    model = build_method("vmfproto", _context(classes, per_class, dim, grid), end_to_end_epochs=3)
    train = [data.batch([i % classes for i in range(k, k + 16)]) for k in range(0, 64, 16)]
    test = data.batch([i % classes for i in range(40)])
    discovery, end_to_end = model.stages()
    for batch in train:
        assert model.loss_terms(batch, discovery, 0) == {}
        model.after_step(batch, discovery, 0)
    assert model.seen.all()
    optimiser = torch.optim.Adam([{"params": g.params, "lr": g.lr} for g in end_to_end.param_groups])
    losses = []
    for epoch in range(1, 1 + end_to_end.epochs):
        for batch in train:
            terms = model.loss_terms(batch, end_to_end, epoch)
            loss = sum(model.loss_weights[name] * value for name, value in terms.items())
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            model.after_step(batch, end_to_end, epoch)
            losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    steps = len(train)
    assert sum(losses[-steps:]) < sum(losses[:steps])  # the objective goes down
    assert torch.allclose(model.mu.norm(dim=-1), torch.ones(classes, per_class))
    assert model.block.proj.weight.abs().sum() > 0  # the block trained
    with torch.no_grad():
        accuracy = (model.logits(test).argmax(-1) == test.labels).float().mean().item()
        maps = model.activation_maps(test, test.labels)
    assert accuracy >= 0.8  # chance is 0.25
    assert maps.shape == (40, per_class, *grid)
    fg = data.fg.view(grid)
    best = maps.amax(1)  # the best prototype of the true class fires on the object
    assert (best[:, fg].mean() > best[:, ~fg].mean()).item()


def test_stage2_prototypes_off_freezes_the_mixture() -> None:
    classes, dim, grid = 3, 16, (4, 4)
    data = SyntheticParts(classes, 2, dim, grid, seed=3)
    model = build_method("vmfproto", _context(classes, 2, dim, grid), stage2_prototypes=False)
    discovery, end_to_end = model.stages()
    model.after_step(data.batch([0, 1, 2]), discovery, 0)
    mixture = [p.detach().clone() for p in (model.mu, model.rho, model.alpha)]
    optimiser = torch.optim.Adam([{"params": g.params, "lr": 1e-2} for g in end_to_end.param_groups])
    for _ in range(2):
        batch = data.batch([0, 1, 2, 0])
        loss = sum(model.loss_weights[k] * v for k, v in model.loss_terms(batch, end_to_end, 1).items())
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        model.after_step(batch, end_to_end, 1)
    assert all(torch.equal(a, b) for a, b in zip(mixture, (model.mu, model.rho, model.alpha)))
    assert model.block.proj.weight.abs().sum() > 0


def test_logits_maps_and_ppd_match_the_equations() -> None:
    classes, per_class, dim, grid = 3, 2, 8, (2, 3)
    data = SyntheticParts(classes, per_class, dim, grid, seed=4)
    model = build_method("vmfproto", _context(classes, per_class, dim, grid), gating="attention")
    with torch.no_grad():
        model.rho.copy_(torch.randn(classes, per_class))
        model.alpha.copy_(torch.randn(classes, per_class))
    batch = data.batch([0, 2, 0, 1, 0])
    batch.attention[0] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # image 0: one foreground patch
    t = model.trainable_tokens(batch).detach()
    mask = model.foreground(batch)
    mu, kappa, log_pi = model.prototype_means().detach(), model.kappa.detach(), model.log_pi.detach()
    log_c = log_vmf_normaliser(kappa, dim)
    s = log_c + kappa * torch.einsum("bnd,cjd->bncj", t, mu)  # Eq. (ot_score)
    log_p = torch.logsumexp(log_pi + s, dim=-1)  # Eq. (logsumexp)
    expected = torch.stack([log_p[b][mask[b]].sum(0) / (mask[b].sum() + 1e-6) for b in range(5)])  # Eq. (class_logit)
    with torch.no_grad():
        torch.testing.assert_close(model.logits(batch), expected)
        maps = model.activation_maps(batch, batch.labels)
    own = s[torch.arange(5), :, batch.labels]  # B×N×J
    torch.testing.assert_close(maps, own.transpose(1, 2).reshape(5, per_class, *grid))

    # OT per class over the stacked foreground patches of its images, then L_ppd by hand
    labels = model.ot_labels(own, mask, batch.labels, 1)
    losses = []
    for c in (0, 1, 2):
        rows = own[batch.labels == c][mask[batch.labels == c]]  # M_c×J
        m = rows.shape[0]
        plan = sinkhorn_log(rows, torch.full((m,), 1.0 / m), log_pi[c].exp(), 0.05, 10)
        target = hard_assignment(plan)
        assert torch.equal(labels[batch.labels == c][mask[batch.labels == c]], target)
        losses.append(F.cross_entropy(rows, target))
    torch.testing.assert_close(model.ppd_loss(own, mask, batch.labels, 1), torch.stack(losses).mean())
