"""TesNet adapter (docs/protocol/tesnet.md): SubSep through the Gram identity against the brute-force
C×C×K×K value, its finite gradient, Orth and the projection on hand values, renormalisation after
each step, the single push at epoch 10, and training on synthetic tokens."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from benchmark.run.training import train
from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData
from methods.tesnet import orthogonality_cost, projections, subspace_separation



def _brute_force_subsep(basis: torch.Tensor, J: int) -> torch.Tensor:
    """train_and_test.py's formula literally: Π_c = B_cᵀB_c (C×K×K), all C×C Frobenius distances."""
    per_class = basis.view(-1, J, basis.shape[1])
    projection = per_class.transpose(1, 2) @ per_class
    pairwise = (projection[:, None] - projection[None, :]).flatten(2).norm(dim=-1)  # C×C
    return 0.5 * pairwise.sum() / math.sqrt(2.0)


@pytest.mark.parametrize("normalise", [False, True])
def test_subspace_separation_identity_equals_brute_force(normalise: bool) -> None:
    torch.manual_seed(0)
    basis = torch.rand(5 * 3, 7, dtype=torch.float64)  # C = 5, J = 3, K = 7 (rows not orthonormal)
    if normalise:
        basis = F.normalize(basis, dim=1)
    assert subspace_separation(basis, 3).item() == pytest.approx(_brute_force_subsep(basis, 3).item(), rel=1e-9)


def test_subspace_separation_gradient_is_finite_when_two_classes_share_a_subspace() -> None:
    torch.manual_seed(0)
    rows = torch.randn(2, 6, dtype=torch.float64)
    # C = 3, J = 2: classes 0 and 1 span the same subspace
    basis = torch.cat([rows, rows, torch.randn(2, 6, dtype=torch.float64)]).requires_grad_(True)
    value = subspace_separation(basis, 2)
    value.backward()
    assert torch.isfinite(basis.grad).all()
    assert value.item() == pytest.approx(_brute_force_subsep(basis.detach(), 2).item(), rel=1e-6)


def test_orthogonality_cost_hand_example() -> None:
    basis = torch.tensor([[1.0, 0.0], [1.0, 1.0],   # class 0: BBᵀ − I = [[0, 1], [1, 1]] → 3
                          [2.0, 0.0], [0.0, 0.0]])  # class 1: BBᵀ − I = [[3, 0], [0, −1]] → 4
    assert orthogonality_cost(basis, 2).item() == 7.0


def test_projection_uses_the_unit_basis_and_not_the_unit_latent() -> None:
    latent = torch.tensor([[[3.0, 4.0], [0.0, 2.0]]])
    basis = torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    assert torch.equal(projections(latent, basis), torch.tensor([[[3.0, 0.0], [4.0, 2.0]]]))


def test_schedule_loss_weights_and_renormalisation_after_each_step() -> None:
    source = SyntheticTokens()
    torch.manual_seed(0)
    method = build_method("tesnet", source.context(3))
    assert method.loss_weights == {"ce": 1.0, "clst": 0.8, "sep": -0.08, "l1": 1e-4, "orth": 1e-4, "subsep": -1e-7}
    warm, joint = method.stages()
    assert [(g.name, g.lr, g.weight_decay) for g in warm.param_groups] == [("add_on", 3e-3, 1e-3), ("basis", 3e-3, 0.0)]
    assert (warm.epochs, joint.epochs, method.push_epochs) == (5, 15, (10,))
    batch = source.batch(torch.arange(8))
    terms = method.loss_terms(batch, warm, 0)
    assert set(terms) == {"ce", "clst", "sep", "orth", "subsep"}
    with torch.no_grad():
        method.after_step(batch, warm, 0)
    assert torch.allclose(method.basis.norm(dim=1), torch.ones(12))


def test_single_push_at_epoch_10_copies_the_most_projected_own_class_patch() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    torch.manual_seed(0)
    method = build_method("tesnet", source.context(3))
    data, joint = SyntheticTrainData(source), method.stages()[1]
    before = copy.deepcopy(method.state_dict())
    with torch.no_grad():
        for epoch in (9, 19):
            method.on_epoch_end(joint, epoch, data)
    assert all(torch.equal(before[k], v) for k, v in method.state_dict().items())
    with torch.no_grad():
        everything = source.batch(torch.arange(len(source)))
        scores = projections(method.latent(everything), method.basis)  # B×P×N, before the push
        method.on_epoch_end(joint, 10, data)
        pushed_latent = method.latent(source.batch(method.push_image))[torch.arange(12), method.push_position]
    own = (everything.labels[:, None] == torch.arange(12)[None, :] // 3)[:, :, None]
    best = scores.masked_fill(~own, -math.inf).amax(dim=(0, 2))
    assert torch.equal(source.labels[method.push_image], torch.arange(12) // 3)
    assert torch.allclose(scores[method.push_image, torch.arange(12), method.push_position], best)
    assert torch.allclose(method.basis, F.normalize(pushed_latent, dim=1), atol=1e-6)
    assert not torch.equal(method.last_layer.weight, before["last_layer.weight"])


def test_trains_far_above_chance_with_the_paper_schedule() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=32)
    torch.manual_seed(0)
    method = build_method("tesnet", source.context(3))
    train(method, source, seed=0, batch_size=16, device=torch.device("cpu"), checkpoint_path=None, log=lambda _: None)
    batch = source.batch(torch.arange(len(source)))
    with torch.no_grad():
        accuracy = float((method.logits(batch).argmax(1) == batch.labels).float().mean())
    assert accuracy >= 0.8
    assert torch.allclose(method.basis.norm(dim=1), torch.ones(12))


def test_expanded_variant_learns() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=16)
    torch.manual_seed(0)
    method = build_method("tesnet", source.context(3), expanded=True)
    train(method, source, seed=0, batch_size=16, device=torch.device("cpu"), checkpoint_path=None, log=lambda _: None)
    batch = source.batch(torch.arange(len(source)))
    with torch.no_grad():
        assert float((method.logits(batch).argmax(1) == batch.labels).float().mean()) >= 0.8
