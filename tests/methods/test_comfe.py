"""ComFe equals its official behaviour on identical inputs (tests/helpers/comfe_reference.py, an
independent reference written from ``emannix/comfe-component-features``): forward (every level's
prototypes, patch logits, assignments and scores; logits and maps), each loss term, the decoder
layer, two optimiser steps (clip, AdamW groups, per-step warmup-cosine), the prototype
assignment and exemplar search. Tiny configuration: C = 4, k = J = 2, G = 3, Q = 3, D = 16,
2 heads, L = 2, grid 4×4, B = 3 images per view; every parameter perturbed so that each matters."""
from __future__ import annotations

import math

import pytest
import torch

import comfe_reference as ref
from benchmark.run.schedules import make_optimizer, make_scheduler, warmup_cosine_factor
from benchmark.run.training import run_epoch
from methods.base import MethodContext, TokenBatch
from methods.comfe import losses
from methods.comfe.explain import nearest_exemplars, present_prototypes
from methods.comfe.losses import LOSS_TERMS
from methods.registry import build_method
from methods.testing import SyntheticTokens

C, K_PER, G, Q, D, HEADS, L, GRID, B = 4, 2, 3, 3, 16, 2, 2, (4, 4), 3
EPS = 0.1
CFG = {"C": C, "k": K_PER, "G": G, "L": L, "heads": HEADS, "tau1": 0.1, "tau2": 0.02, "tauc": 0.02, "eps": EPS}
TOL = 1e-5


def build(**overrides):
    ctx = MethodContext(num_classes=C, prototypes_per_class=K_PER, embed_dim=D, grid=GRID, num_prefix_tokens=1,
                        depth=4, make_block=lambda: None, seed=0)
    args = {"image_prototypes": Q, "background_prototypes": G, "layers": L, "heads": HEADS, "feedforward_dim": 32,
            "dropout": 0.0, **overrides}
    method = build_method("comfe", ctx, **args)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # perturb every parameter (zero MHA biases, unit norms would hide mistakes)
        for p in method.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return method


def params(method) -> dict[str, torch.Tensor]:
    return {name.removeprefix("head."): p.detach().clone() for name, p in method.named_parameters()}


def tokens(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, GRID[0] * GRID[1], D, generator=torch.Generator().manual_seed(seed))


def batch_of(x: torch.Tensor, labels: torch.Tensor) -> TokenBatch:
    n = len(labels)
    return TokenBatch(tokens=x, block_input=None, attention=None, labels=labels, indices=torch.arange(n), grid=GRID)


def test_membership_rows_and_class_major_mapping():
    method = build()
    expected = ref.membership(C, K_PER, G, EPS)
    assert method.member.shape == (K_PER * (C + 1) + G, C + 1)
    assert torch.allclose(method.member, expected, atol=1e-7)
    for c in range(C):
        for j in range(K_PER):
            row = int(losses.class_prototype_row(torch.tensor(c), j, C, True))
            assert row == 5 * j + c and int(method.member[row].argmax()) == c


def test_decoder_layer_matches_reference():
    method = build().eval()
    p = params(method)
    tgt, mem = torch.randn(B, Q, D), torch.randn(B, GRID[0] * GRID[1], D)
    got = method.head.decoder.layers[0](tgt, mem)
    assert (got - ref.decoder_layer(tgt, mem, p, "decoder.layers.0", HEADS)).abs().max() < TOL


def test_every_level_and_the_logits_match_reference():
    method = build().eval()
    x = tokens(B)
    with torch.no_grad():
        levels = method.forward_levels(x)
        expected = ref.levels(x, params(method), layers=L, heads=HEADS, temp_pred=0.1)
        assert len(levels) == L + 1
        for level, (z, logits) in zip(levels, expected):
            assert (level.prototypes - z).abs().max() < TOL
            assert (level.patch_logits - logits).abs().max() < 1e-4
            out = ref.scores(z, logits, params(method)["cluster_class"], ref.membership(C, K_PER, G, EPS), 0.02)
            for got, key in ((level.assignment, "A"), (level.class_assignment, "R"),
                             (level.prototype_classes, "Pi"), (level.patch_classes, "P"), (level.scores, "s")):
                assert (got - out[key]).abs().max() < 1e-4, key
        assert torch.equal(method.logits(batch_of(x, torch.zeros(B, dtype=torch.long))), levels[-1].scores[:, :C])
    assert torch.allclose(levels[0].prototypes[0], levels[0].prototypes[1])  # level 0 is image-independent


@pytest.mark.parametrize("term", LOSS_TERMS)
def test_each_loss_term_matches_reference(term):
    method = build(terms=LOSS_TERMS).train()
    x, labels = tokens(2 * B, seed=3), torch.tensor([0, 1, 3, 0, 1, 3])
    # distinct halves (views that differ), so that the two-view pairing is exercised
    method.training_rows = lambda batch: (x, labels)
    got = method.loss_terms(batch_of(x[:B], labels[:B]), method.stages()[0], 0)
    expected = ref.loss_terms(x, labels, params(method), cfg=CFG, terms=(term,))
    assert set(got) == set(LOSS_TERMS)
    difference = abs(float(got[term].detach()) - float(expected[term].detach()))
    assert difference < 1e-4, (term, difference)


def test_class_contrast_matches_reference_on_close_class_prototypes():
    """Random class prototypes are near-orthogonal at τc = 0.02 (term ≈ 0): crowd them instead."""
    method = build(terms=("pyz", "class_contrast"))
    with torch.no_grad():
        crowded = torch.randn(D) + 0.05 * torch.randn(method.head.cluster_class.shape,
                                                       generator=torch.Generator().manual_seed(8))
        method.head.cluster_class.copy_(crowded)
    got = method.loss_terms(batch_of(tokens(B), torch.tensor([0, 1, 2])), method.stages()[0], 0)["class_contrast"]
    expected = ref.class_contrast(method.head.cluster_class.detach(), 0.02)
    assert float(expected) > 0.1  # the term is exercised
    assert abs(float(got.detach()) - float(expected)) < 1e-5


def test_terms_switch_off_by_name_and_views_duplicate_the_batch():
    method = build(terms=("pyz", "pz"))
    x, labels = tokens(B), torch.tensor([2, 0, 1])
    rows, rows_labels = method.training_rows(batch_of(x, labels))
    assert torch.equal(rows, torch.cat([x, x])) and torch.equal(rows_labels, torch.tensor([2, 0, 1, 2, 0, 1]))
    assert set(method.loss_terms(batch_of(x, labels), method.stages()[0], 0)) == {"pyz", "pz"}
    one = build(views=1, terms=("pyz", "pyp", "pz", "image_contrast"))
    assert one.training_rows(batch_of(x, labels))[0] is x
    with pytest.raises(ValueError, match="views = 1"):
        build(views=1)


def test_hand_values_of_the_score_terms():
    # pyz: Σ_t −[y log s + (1−y) log(1−s)], background target 1 for every image
    s = torch.tensor([[0.7, 0.2, 0.1, 0.3, 0.6]])
    y = losses.targets(torch.tensor([0]), C, True)
    hand = -(math.log(0.7) + math.log(0.8) + math.log(0.9) + math.log(0.7) + math.log(0.6))
    assert abs(float(losses.score_bce(s, y)) - hand) < 1e-5
    # ε = 0 and s = 1: the clamp makes the log-odds log(1/1e-6)
    x = math.log(1 / 1e-6)
    bce_at_one = float(losses.score_bce(torch.tensor([[1.0]]), torch.tensor([[0.0]])))
    assert abs(bce_at_one - (x + math.log1p(math.exp(-x)))) < 1e-3


def test_contrast_and_consistency_hand_cases():
    z = torch.eye(Q, D).expand(2, Q, D)
    level = losses.Level(z, torch.zeros(2, 4, Q), torch.full((2, 4, Q), 1 / Q), None, None, None, None)
    assert float(losses.image_contrast(level, 0.02)) < 1e-6  # orthonormal prototypes
    same = losses.Level(torch.ones(2, Q, D) / D ** 0.5, None, None, None, None, None, None)
    assert abs(float(losses.image_contrast(same, 0.02)) - math.log(Q)) < 1e-5
    assert abs(float(losses.patch_consistency(level)) - math.log(Q)) < 1e-6  # uniform assignments
    onehot = torch.nn.functional.one_hot(torch.tensor([[0, 1, 2, 0], [0, 1, 2, 0]]), Q).float()
    assert float(losses.patch_consistency(losses.Level(None, None, onehot, None, None, None, None))) == 0.0
    assert abs(float(losses.pz(losses.Level(None, torch.zeros(1, 2, Q), None, None, None, None, None)))
               + math.log(Q)) < 1e-6


def test_schedule_factors_match_the_closed_form():
    method = build(epochs=50, warmup_epochs=10)
    per_epoch, total = 93, 50 * 93  # CUB: 5994 // 64
    for step in (0, 465, 930, (930 + 3720) // 2, 3720, 3721, total - 1):
        lr = 5e-4 * warmup_cosine_factor(method.schedule, step, total, per_epoch)
        expected = ref.warmup_cosine(step, total, per_epoch, warmup_epochs=10.0, ref=5e-4, start=5e-5, final=5e-6)
        assert abs(lr - expected) < 1e-12, step


def test_two_optimiser_steps_match_reference():
    """run_epoch over two batches: gradients → clip 0.01 → AdamW (no decay on biases) → per-step lr."""
    source = SyntheticTokens(num_classes=C, images_per_class=2, dim=D, grid=GRID, seed=2)
    method = build(epochs=3, warmup_epochs=1)
    start = params(method)
    stage = method.stages()[0]
    assert stage.optimizer == "adamw" and stage.clip_grad_norm == 0.01
    optimizer = make_optimizer(stage)
    scheduler = make_scheduler(stage, optimizer, steps_per_epoch=2)
    order = torch.tensor([5, 0, 3, 6, 1, 2, 7, 4])
    run_epoch(method, source, stage, optimizer, order, batch_size=4, device=torch.device("cpu"), epoch=0,
              step_scheduler=scheduler)
    lrs = [ref.warmup_cosine(s, 6, 2, warmup_epochs=1.0, ref=5e-4, start=5e-5, final=5e-6) for s in range(3)]
    assert abs(optimizer.param_groups[0]["lr"] - lrs[2]) < 1e-12

    def grads_of(p, step):
        rows = order[4 * step:4 * step + 4]
        x, labels = source.tokens[rows], source.labels[rows]
        live = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        terms = ref.loss_terms(torch.cat([x, x]), labels.repeat(2), live, cfg=CFG,
                               terms=("pyz", "pyp", "pz", "image_contrast", "patch_consistency"))
        grads = torch.autograd.grad(sum(terms.values()), list(live.values()))
        return dict(zip(live, grads))

    expected, clipped = ref.adamw_steps(start, grads_of, 2, lrs[:2], wd=0.05, clip=0.01)
    got = params(method)
    for name, p in method.named_parameters():
        key = name.removeprefix("head.")
        assert (p.grad - clipped[1][key]).abs().max() < 1e-7, key
        assert (got[key] - expected[key]).abs().max() < 5e-6, key
    assert any((got[k] - start[k]).abs().max() > 1e-5 for k in got)


def test_prototype_assignment_and_exemplar_search():
    method = build().eval()
    x = tokens(B, seed=5)
    with torch.no_grad():
        level = method.forward_levels(x)[-1]
    present = present_prototypes(level)
    hard = level.assignment.argmax(dim=-1)
    expected = [(b, q) for b in range(B) for q in range(Q) if bool((hard[b] == q).any())]
    assert list(zip(present.image.tolist(), present.slot.tolist())) == expected
    for i, (b, q) in enumerate(expected):
        assert int(present.labels[i]) == int(level.prototype_classes[b, q].argmax())
        assert torch.equal(present.prototypes[i], level.prototypes[b, q])
    bank = torch.nn.functional.normalize(torch.randn(10, D, generator=torch.Generator().manual_seed(6)), dim=-1)
    classes = torch.randn(4, D)
    bank[7] = torch.nn.functional.normalize(classes[2], dim=0)  # a planted exact match
    rows, values = nearest_exemplars(bank, classes, 3)
    assert int(rows[2, 0]) == 7 and abs(float(values[2, 0]) - 1.0) < 1e-6
    brute = torch.nn.functional.normalize(classes, dim=-1) @ bank.T
    assert torch.equal(rows[:, 0], brute.argmax(dim=1))


def test_maps_decompose_the_class_scores():
    method = build(dropout=0.1).eval()
    x, classes = tokens(B, seed=7), torch.tensor([3, 0, 2])
    batch = batch_of(x, classes)
    with torch.no_grad():
        level = method.forward_levels(x)[-1]
        maps = method.activation_maps(batch, classes).flatten(2)
        patch = level.patch_classes[torch.arange(B), :, classes]
        assert ((1 - EPS) * maps.sum(1) + EPS / (C + 1) - patch).abs().max() < 1e-6
        logits = method.logits(batch)
        contributions = method.prototype_contributions(batch, classes)
        assert (contributions.sum(1) + EPS / (C + 1) - logits[torch.arange(B), classes]).abs().max() < 1e-6
        everything = method.logits_without(batch, classes, torch.ones(B, K_PER, dtype=torch.bool))
        assert torch.allclose(everything[torch.arange(B), classes], torch.full((B,), EPS / (C + 1)), atol=1e-6)
        assert torch.equal(method.logits(batch), logits)  # eval: dropout off, deterministic
