"""methods.common.lineage: the ProtoPNet-lineage pieces (docs/protocol/lineage.md): add-on and last-layer initialisation, cluster/separation costs and masked L1 on hand
examples, the push, and the last-layer-only phase on fixed features."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods.base import TokenBatch
from methods.common.lineage import (
    cluster_cost,
    init_prototypes,
    last_layer_phase,
    make_add_on,
    make_last_layer,
    masked_l1,
    push_prototypes,
    separation_cost,
    train_last_layer,
)
from methods.testing import SyntheticTokens, SyntheticTrainData



# ---- construction ------------------------------------------------------------------------------
def test_add_on_layout_and_kaiming_fan_out_init() -> None:
    torch.manual_seed(0)
    add_on = make_add_on((256, 512, 512))
    assert [type(m) for m in add_on] == [nn.Linear, nn.ReLU, nn.Linear, nn.Sigmoid]
    for linear in (add_on[0], add_on[2]):
        assert torch.equal(linear.bias, torch.zeros_like(linear.bias))
        # Kaiming normal, fan_out = out_features = 512, ReLU gain √2: std = √(2/512) = 0.0625
        assert linear.weight.std().item() == pytest.approx(0.0625, rel=0.03)
        assert linear.weight.mean().item() == pytest.approx(0.0, abs=0.002)
    assert [type(m) for m in make_add_on((8, 4), final=nn.Sigmoid)] == [nn.Linear, nn.Sigmoid]
    assert [type(m) for m in make_add_on((8, 4, 4), hidden=None, final=None)] == [nn.Linear, nn.Linear]


def test_prototypes_uniform_in_unit_interval() -> None:
    torch.manual_seed(0)
    p = init_prototypes(200, 64)
    assert p.shape == (200, 64) and p.requires_grad
    assert p.min() >= 0 and p.max() < 1
    assert p.mean().item() == pytest.approx(0.5, abs=0.01)


def test_last_layer_plus_one_own_class_minus_half_others() -> None:
    layer = make_last_layer(num_classes=3, prototypes_per_class=2)
    assert layer.bias is None and layer.weight.shape == (3, 6)
    expected = torch.tensor([
        [1.0, 1.0, -0.5, -0.5, -0.5, -0.5],
        [-0.5, -0.5, 1.0, 1.0, -0.5, -0.5],
        [-0.5, -0.5, -0.5, -0.5, 1.0, 1.0],
    ])
    assert torch.equal(layer.weight, expected)


# ---- losses --------------------------------------------------------------------------------------
def test_cluster_and_separation_costs_hand_example() -> None:
    # C = 2, J = 2: prototypes 0, 1 are class 0; 2, 3 are class 1
    min_distances = torch.tensor([[0.5, 2.0, 0.1, 3.0],
                                  [4.0, 1.0, 0.7, 0.2]], requires_grad=True)
    labels = torch.tensor([0, 1])
    # image 0 (class 0): own min(0.5, 2.0) = 0.5, other min(0.1, 3.0) = 0.1
    # image 1 (class 1): own min(0.7, 0.2) = 0.2, other min(4.0, 1.0) = 1.0
    clst = cluster_cost(min_distances, labels, 2)
    sep = separation_cost(min_distances, labels, 2)
    assert clst.item() == pytest.approx((0.5 + 0.2) / 2)
    assert sep.item() == pytest.approx((0.1 + 1.0) / 2)
    (clst + 10 * sep).backward()
    # the gradient reaches the arg-min entries only, 1/B each
    assert torch.equal(min_distances.grad, torch.tensor([[0.5, 0.0, 5.0, 0.0], [0.0, 5.0, 0.0, 0.5]]))


def test_masked_l1_counts_wrong_class_weights_only() -> None:
    weight = torch.tensor([[1.0, -2.0, 3.0, -4.0],
                           [5.0, -6.0, 7.0, -8.0]])
    # class 0 owns prototypes 0, 1; class 1 owns 2, 3: |3| + |−4| + |5| + |−6| = 18
    assert masked_l1(weight, 2).item() == 18.0


# ---- push ------------------------------------------------------------------------------------------
def _brute_force_push(source: SyntheticTokens, prototypes: torch.Tensor, J: int, images: torch.Tensor):
    """Nearest same-class token per prototype by explicit loops (first image, then first position, on ties)."""
    found = []
    for p, prototype in enumerate(prototypes):
        best = (math.inf, -1, -1)
        for i in images.tolist():
            if int(source.labels[i]) != p // J:
                continue
            for n in range(source.tokens.shape[1]):
                d = float(((source.tokens[i, n] - prototype) ** 2).sum())
                if d < best[0]:
                    best = (d, i, n)
        found.append(best)
    return found


def _identity_latent(prototypes: torch.Tensor):
    def latent_and_scores(batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        distances = ((batch.tokens[:, None, :, :] - prototypes[None, :, None, :]) ** 2).sum(-1)  # B×P×N
        return batch.tokens, -distances
    return latent_and_scores


@pytest.mark.parametrize("batch_size", [5, 48])
def test_push_copies_nearest_same_class_patch_never_another_class(batch_size: int) -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=12, seed=3)
    J = 2
    torch.manual_seed(0)
    prototypes = torch.randn(8, source.dim)
    # a decoy: prototype 0 (class 0) is an exact copy of a token of a class-1 image (distance 0)
    decoy_image = int(torch.nonzero(source.labels == 1)[0])
    prototypes[0] = source.tokens[decoy_image, 7]
    result = push_prototypes(SyntheticTrainData(source), _identity_latent(prototypes), J, batch_size=batch_size)
    expected = _brute_force_push(source, prototypes, J, torch.arange(len(source)))
    for p, (_, image, position) in enumerate(expected):
        assert int(result.image_index[p]) == image and int(result.position[p]) == position
        assert torch.equal(result.vectors[p], source.tokens[image, position])
        assert int(source.labels[result.image_index[p]]) == p // J
    assert int(result.image_index[0]) != decoy_image


def test_push_leaves_prototypes_of_absent_classes_unmatched() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=6, seed=1)
    images = torch.nonzero(source.labels != 3).squeeze(1)  # class 3 has no image in this split
    prototypes = torch.randn(4, source.dim)
    result = push_prototypes(SyntheticTrainData(source, images), _identity_latent(prototypes), 1, batch_size=7)
    assert result.image_index[3] == -1 and result.position[3] == -1 and result.score[3] == -math.inf
    assert bool((result.image_index[:3] >= 0).all())


# ---- the last-layer-only phase -----------------------------------------------------------------
def test_train_last_layer_lowers_ce_on_fixed_features_and_shrinks_wrong_class_weights() -> None:
    torch.manual_seed(0)
    C, J, n = 4, 2, 64
    labels = torch.arange(C).repeat_interleave(n // C)
    features = torch.rand(n, C * J) + F.one_hot(labels * J, C * J).float()  # a weakly separable problem
    layer = make_last_layer(C, J)
    before = F.cross_entropy(features @ layer.weight.T, labels).item()
    train_last_layer(layer, features, labels, prototypes_per_class=J, epochs=20, lr=1e-3, batch_size=16, l1_weight=0.0)
    assert F.cross_entropy(features @ layer.weight.T, labels).item() < before
    strong = make_last_layer(C, J)
    train_last_layer(strong, features, labels, prototypes_per_class=J, epochs=20, lr=1e-2, batch_size=16, l1_weight=1.0)
    assert masked_l1(strong.weight, J).item() < 0.1 * masked_l1(make_last_layer(C, J).weight, J).item()


def test_last_layer_phase_only_touches_the_last_layer_and_is_deterministic() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=8)
    J = 2

    def build() -> tuple[nn.Module, nn.Linear]:
        torch.manual_seed(0)
        head = nn.Sequential(nn.Linear(source.dim, 4 * J), nn.Sigmoid()).requires_grad_(False)
        return head, make_last_layer(4, J).requires_grad_(False)

    weights = []
    for _ in range(2):
        head, last = build()
        frozen = [p.clone() for p in head.parameters()]
        pooled = lambda batch: head(batch.tokens).amax(dim=1)  # noqa: E731  (B×P max over the grid)
        data = SyntheticTrainData(source)
        features = torch.cat([pooled(b) for b in data.batches(64)])
        before = F.cross_entropy(last(features), source.labels).item()
        torch.manual_seed(1)
        with torch.no_grad():  # as the training loop calls on_epoch_end
            last_layer_phase(last, data, pooled, prototypes_per_class=J, epochs=20, lr=1e-3, batch_size=8,
                             l1_weight=1e-4)
        assert F.cross_entropy(last(features), source.labels).item() < before
        assert all(torch.equal(a, b) for a, b in zip(frozen, head.parameters()))
        assert not last.weight.requires_grad and not any(p.requires_grad for p in head.parameters())
        weights.append(last.weight.clone())
    assert torch.equal(weights[0], weights[1])
