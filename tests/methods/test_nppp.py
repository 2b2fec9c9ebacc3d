"""NPPP: seeded PCA foreground and its sign rule, per-group Sinkhorn (against POT), sum momentum
update, score aggregation, background-weighted L_ppd, stages, and training on synthetic tokens."""
import copy
import math

import numpy as np
import ot
import pytest
import torch
import torch.nn.functional as F

from benchmark.run.training import train
from methods.common.ot import sinkhorn_log
from methods.contract import check_method
from methods.diagnostics import collect_diagnostics
from methods.nppp import NPPP
from methods.nppp.model import PCA_SEED_STRIDE
from methods.nppp.clustering import balanced_assignments, momentum_sum_update, ppd_loss, score_aggregation
from methods.nppp.foreground import first_principal_component, pca_foreground
from methods.testing import SyntheticTokens

CPU = torch.device("cpu")


def quiet(line: str) -> None:
    pass


def test_contract() -> None:
    check_method("methods.nppp:NPPP")


def test_sinkhorn_equalises_prototype_usage_on_a_balanced_case() -> None:
    scores = torch.tensor([0.9, 0.8, 0.7], dtype=torch.float64).repeat(6, 1)
    scores[torch.arange(6), torch.arange(6) % 3] += 0.02  # every patch still prefers prototype 0
    assert scores.argmax(1).tolist() == [0] * 6
    labels = balanced_assignments(scores, torch.zeros(6, dtype=torch.long), epsilon=0.05, iterations=3)
    assert torch.bincount(labels, minlength=3).tolist() == [2, 2, 2]
    assert labels.tolist() == [0, 1, 2, 0, 1, 2]


def _pot_labels(scores: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    m, j = scores.shape
    plan = ot.sinkhorn(np.full(m, 1.0 / m), np.full(j, 1.0 / j), -scores.numpy(), 0.05, numItermax=3, stopThr=0.0,
                       warn=False)
    return plan, plan.argmax(1)


def test_per_group_sinkhorn_matches_pot() -> None:
    g = torch.Generator().manual_seed(0)
    groups = torch.tensor([2, 0, 2, 5, 0, 2, 2, 5, 0, 2, 2, 2, 0, 5, 2, 2])  # sizes 4, 3, 9 interleaved
    scores = torch.rand(16, 3, generator=g, dtype=torch.float64) * 2 - 1
    labels = balanced_assignments(scores, groups, epsilon=0.05, iterations=3)
    for group in (0, 2, 5):
        members = groups == group
        plan, expected = _pot_labels(scores[members])
        assert labels[members].tolist() == expected.tolist()
        ours = sinkhorn_log(scores[members], torch.full((int(members.sum()),), 1.0 / int(members.sum()),
                                                         dtype=torch.float64),
                            torch.full((3,), 1.0 / 3, dtype=torch.float64), 0.05, 3)
        assert np.allclose(ours.numpy(), plan, rtol=1e-9, atol=1e-12)


def test_momentum_update_uses_sums_not_means() -> None:
    prototypes = torch.tensor([[[1.0, 1.0], [2.0, 0.0]],     # group 0 (present)
                               [[0.0, 3.0], [1.0, 1.0]],     # group 1 (absent)
                               [[0.5, 0.5], [0.0, -1.0]]])   # group 2 = background (present)
    tokens = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    groups, labels = torch.tensor([0, 0, 2]), torch.tensor([0, 0, 1])
    new = momentum_sum_update(prototypes, tokens, groups, labels, 0.99)
    assert torch.allclose(new[0, 0], 0.99 * prototypes[0, 0] + 0.01 * torch.tensor([1.0, 1.0]))  # sum, not [.5, .5]
    assert not torch.allclose(new[0, 0], 0.99 * prototypes[0, 0] + 0.01 * torch.tensor([0.5, 0.5]))
    assert torch.allclose(new[0, 1], 0.99 * prototypes[0, 1])  # present group, no patch: decays
    assert torch.equal(new[1], prototypes[1])  # absent group: unchanged
    assert torch.allclose(new[2, 1], 0.99 * prototypes[2, 1] + 0.01 * tokens[2])
    assert torch.equal(new[2, 0], 0.99 * prototypes[2, 0])


@pytest.mark.parametrize("shape", [(60, 8), (5, 12)])
def test_seeded_pca_is_torch_pca_lowrank_with_the_same_draws(shape: tuple[int, int]) -> None:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    ours = first_principal_component(x, 10, torch.Generator().manual_seed(7))
    again = first_principal_component(x, 10, torch.Generator().manual_seed(7))
    torch.manual_seed(7)
    u, _, _ = torch.pca_lowrank(x, q=1, center=True, niter=10)
    assert torch.equal(ours, again)
    assert torch.allclose(ours, u[:, 0], atol=1e-6)


@pytest.mark.parametrize("shape", [(60, 8), (5, 12)])  # tall (q), wide (bᵀ/‖b‖)
def test_component_without_the_svd_is_pca_lowrank_s_up_to_the_backend_sign(shape: tuple[int, int]) -> None:
    signs = set()
    for seed in range(8):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        signed = first_principal_component(x, 10, torch.Generator().manual_seed(7))
        unsigned = first_principal_component(x, 10, torch.Generator().manual_seed(7), backend_sign=False)
        torch.manual_seed(7)
        u = torch.pca_lowrank(x, q=1, center=True, niter=10)[0][:, 0]  # the oracle, with its SVD
        sigma = torch.sign(signed @ unsigned).item()
        assert torch.allclose(sigma * unsigned, u, atol=1e-6)
        if shape[0] > shape[1]:
            assert torch.equal(sigma * unsigned, signed)  # q · (±1): the same floats
        signs.add(sigma)
    assert signs == {-1.0, 1.0}, "LAPACK's sign follows the data, so both occur"


def _two_part_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Raw tokens of 4 images × 10 patches: 3 attended patches along one direction, 7 along another."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.zeros(16), torch.zeros(16)
    a[0], b[1] = 1.0, 1.0
    attended = torch.zeros(4, 10, dtype=torch.bool)
    attended[:, :3] = True
    raw = torch.where(attended[..., None], a, b) + 0.05 * torch.randn(4, 10, 16, generator=g)
    attention = torch.where(attended, 0.3, 0.1 / 7)
    return F.normalize(raw, dim=-1), attention


def test_attention_sign_rule_flips_exactly_when_the_component_tracks_attention() -> None:
    raw, attention = _two_part_batch()
    swapped = raw[..., [1, 0, *range(2, 16)]]  # attended and unattended directions exchanged
    flipped = kept = 0
    for tokens in (raw, -raw, swapped):  # the native sign follows the data (QR/SVD sign conventions)
        for seed in range(3):
            native = pca_foreground(tokens, attention, threshold=0.5, niter=10, sign="native",
                                    generator=torch.Generator().manual_seed(seed))
            fixed = pca_foreground(tokens, attention, threshold=0.5, niter=10, sign="attention",
                                   generator=torch.Generator().manual_seed(seed))
            u = first_principal_component(tokens.flatten(0, 1), 10, torch.Generator().manual_seed(seed)).view(4, 10)
            score = (u - u.min()) / (u.max() - u.min())
            assert torch.equal(native, score <= 0.5)
            if ((u - u.mean()) * (attention - attention.mean())).sum() > 0:
                assert torch.equal(fixed, score >= 0.5)  # negated component: 1 − score ≤ 0.5
                assert torch.equal(native, attention < 0.1)  # the native rule took the background
                flipped += 1
            else:
                assert torch.equal(fixed, native)
                kept += 1
            assert torch.equal(fixed, attention > 0.1)  # the fix always takes the attended patches
    assert flipped > 0 and kept > 0, "both signs occur"


def test_model_foreground_draws_are_seeded_and_resumable() -> None:
    source = SyntheticTokens()
    batch = source.batch(torch.arange(16))
    raw = F.normalize(batch.tokens, dim=-1)
    first, second = NPPP(source.context(3, seed=4)), NPPP(source.context(3, seed=4))
    masks = [first.foreground(raw, batch.attention) for _ in range(3)]
    assert int(first.pca_draws) == 3
    second.load_state_dict(copy.deepcopy(first.state_dict()))
    assert torch.equal(second.foreground(raw, batch.attention), first.foreground(raw, batch.attention))
    replay = NPPP(source.context(3, seed=4))
    assert all(torch.equal(replay.foreground(raw, batch.attention), m) for m in masks)


def test_score_aggregation_hand_example() -> None:
    scores = torch.tensor([[[0.5, 0.1], [0.2, 0.4]]])  # B×C×J
    weights = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])  # softmax: [0.25, 0.75], [0.5, 0.5]
    # class 0: (0.25·2·0.5 + 0.75·2·0.1) / 0.2 = 2; class 1: (0.5·2·0.2 + 0.5·2·0.4) / 0.2 = 3
    assert score_aggregation(scores, weights, 0.2).tolist() == [pytest.approx([2.0, 3.0])]


def test_logits_drop_the_background_group() -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    method = NPPP(source.context(1))
    batch = source.batch(torch.arange(4))
    with torch.no_grad():
        before = method.logits(batch)
        method.prototypes[-1] = method.adapted(batch)[0, 0]  # a background prototype matching a patch
        assert torch.equal(method.logits(batch), before)
        cosine = method.cosine(batch).amax(1)[:, :2]  # B×C×J
        assert torch.allclose(before, score_aggregation(cosine, method.sa_weights, 0.2))


def test_ppd_background_weight_hand_example() -> None:
    # C = 1, J = 1: prototype 0 is class 0, prototype 1 the background
    cosine = torch.tensor([[0.5, 0.1], [0.2, 0.3]])
    targets = torch.tensor([0, 1])
    loss = ppd_loss(cosine, targets, temperature=0.1, background_weight=0.1, prototypes_per_class=1)
    class_term, background_term = math.log(1 + math.exp(-4.0)), math.log(1 + math.exp(-1.0))
    assert loss.item() == pytest.approx((class_term + 0.1 * background_term) / 1.1)
    assert loss.item() != pytest.approx((class_term + background_term) / 2)


def test_stage_one_moves_prototypes_and_stage_two_keeps_them() -> None:
    source = SyntheticTokens()
    method = NPPP(source.context(3))
    discovery, finetune = method.stages()
    assert (discovery.name, discovery.epochs, discovery.trains) == ("discovery", 1, False)
    assert finetune.epochs == 19 and [(g.name, g.lr) for g in finetune.param_groups] == [
        ("block", 1e-4), ("score_aggregation", 1e-6)]
    batch = source.batch(torch.arange(16))
    start = method.prototypes.clone()
    with torch.no_grad():
        method.after_step(batch, discovery, 0)
    assert not torch.equal(method.prototypes, start)
    moved = method.prototypes.clone()
    terms = method.loss_terms(batch, finetune, 1)
    assert set(terms) == {"ce", "ppd"}
    with torch.no_grad():
        method.after_step(batch, finetune, 1)
    assert torch.equal(method.prototypes, moved)
    assert method.loss_terms(batch, discovery, 0) == {}


def test_invalid_hyperparameters_name_the_argument() -> None:
    ctx = SyntheticTokens().context(3)
    for kwargs, argument in (({"sign": "pca"}, "sign"), ({"ot_iterations": 0}, "ot_iterations"),
                             ({"momentum": 1.5}, "momentum"), ({"temperature": 0.0}, "temperature")):
        with pytest.raises((ValueError, TypeError), match=argument):
            NPPP(ctx, **kwargs)


def test_trains_to_high_accuracy_and_round_trips() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=12)
    # J = 7 (of the paper grid): enough prototypes per class for the shared clutter and the parts,
    # as the native PCA rule does not separate this toy's foreground from its background
    method = NPPP(source.context(7))
    train(method, source, seed=0, batch_size=16, device=CPU, checkpoint_path=None, log=quiet)
    held_out = SyntheticTokens(num_classes=4, images_per_class=24)  # same class parts, fresh images
    batch = held_out.batch(torch.arange(len(held_out)))
    with torch.no_grad():
        accuracy = (method.logits(batch).argmax(1) == batch.labels).float().mean().item()
    assert accuracy >= 0.8
    assert int(method.pca_draws) == 20 * 3  # one seeded PCA per training batch
    restored = NPPP(source.context(7, seed=3))
    restored.load_state_dict(copy.deepcopy(method.state_dict()))
    with torch.no_grad():
        assert torch.equal(method.logits(batch), restored.logits(batch))
        assert torch.equal(method.activation_maps(batch, batch.labels), restored.activation_maps(batch, batch.labels))


def test_foreground_fraction_of_the_latest_epoch_survives_a_checkpoint() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = NPPP(source.context(2, seed=3))
    first, second = source.batch(torch.arange(6)), source.batch(torch.arange(6, 12))
    with torch.no_grad():
        method.ot_targets(first, method.cosine(first), 0)
        method.ot_targets(first, method.cosine(first), 1)  # epoch 1 starts a new tally
        method.ot_targets(second, method.cosine(second), 1)
    shares = []
    for draw, batch in ((1, first), (2, second)):  # the run's 2nd and 3rd PCA draws
        generator = torch.Generator().manual_seed(3 * PCA_SEED_STRIDE + draw)
        fg = pca_foreground(F.normalize(batch.tokens, dim=-1), batch.attention, threshold=0.5, niter=10,
                            sign="native", generator=generator)
        shares.append(fg.double().mean(1))
    share = torch.cat(shares)
    diagnostics = collect_diagnostics(method, {})
    assert diagnostics["foreground_fraction"] == pytest.approx(
        {"mean": float(share.mean()), "min": float(share.min()), "epoch": 1, "images": 12})
    restored = NPPP(source.context(2, seed=3))
    restored.load_state_dict(method.state_dict())
    assert collect_diagnostics(restored, {}) == diagnostics
    assert collect_diagnostics(NPPP(source.context(2)), {})["foreground_fraction"] is None  # before training

