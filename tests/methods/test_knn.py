"""Weighted k-NN adapter against a re-statement of DINO's ``knn_classifier``
(``facebookresearch/dino`` @ 04c0ad9, ``eval_knn.py``): L2-normalised train and test features,
``similarity.topk(k)``, one-hot votes weighted by ``exp(sim / T)``, top-1 of the summed votes;
the bank the fit stage stores, the map (loop oracle) and the round trip of a bank of any size."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData

J = 2


def _fitted(source: SyntheticTokens, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    method = build_method("knn", source.context(J, seed=seed), **overrides)
    method.on_stage_start(method.stages()[0], 0, SyntheticTrainData(source, torch.arange(0, len(source), 2),
                                                                    batch_size=5))
    return method.eval()


def official_cls(source: SyntheticTokens, rows: torch.Tensor) -> torch.Tensor:
    """The ViT's output: the final-norm class token (an affine-free LayerNorm here)."""
    return nn.functional.layer_norm(source.block_input[rows].double(), (source.dim,))[:, 0]


def official_knn_votes(train_features, train_labels, test_features, k: int, T: float, num_classes: int):
    """``knn_classifier`` on features already passed through ``nn.functional.normalize``: the
    retrieval one-hot times ``exp(sim / T)``, summed over the k neighbours (``probs``)."""
    similarity = torch.mm(test_features, train_features.t())
    distances, indices = similarity.topk(k, largest=True, sorted=True)
    retrieved = torch.gather(train_labels.view(1, -1).expand(len(test_features), -1), 1, indices)
    one_hot = torch.zeros(len(test_features) * k, num_classes, dtype=test_features.dtype)
    one_hot.scatter_(1, retrieved.view(-1, 1), 1)
    weights = distances.clone().div_(T).exp_()
    return torch.sum(one_hot.view(len(test_features), -1, num_classes) * weights.view(len(test_features), -1, 1), 1)


@pytest.mark.parametrize("k", [20, 5])
def test_votes_equal_the_official_knn_classifier(k: int) -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=12)
    method = _fitted(source, k=k)
    train, test = torch.arange(0, len(source), 2), torch.arange(1, len(source), 2)
    train_features = nn.functional.normalize(official_cls(source, train), dim=1, p=2)
    test_features = nn.functional.normalize(official_cls(source, test), dim=1, p=2)
    expected = official_knn_votes(train_features, source.labels[train], test_features, k, 0.07, 4)
    with torch.no_grad():
        ours = method.logits(source.batch(test))
    assert (method.bank.double() - train_features).abs().max() < 1e-6
    assert torch.equal(method.bank_labels, source.labels[train])
    # exp(sim/0.07) reaches e^14: a relative bound
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(ours.argmax(dim=1), expected.argmax(dim=1))


def test_map_is_the_vote_weighted_patch_cosine_to_the_class_neighbours() -> None:
    """Loop oracle, including a class that received no vote (its nearest bank entry)."""
    source = SyntheticTokens(num_classes=4, images_per_class=12)
    method = _fitted(source, k=3)
    test = torch.arange(1, len(source), 2)[:8]
    batch = source.batch(test)
    classes = (batch.labels + 1) % 4
    with torch.no_grad():
        maps = method.activation_maps(batch, classes)
    bank, labels = method.bank.double(), method.bank_labels
    features = nn.functional.normalize(official_cls(source, test), dim=1)
    tokens = nn.functional.normalize(batch.tokens.double(), dim=2)
    without_vote = 0
    for i in range(len(test)):
        sims = bank @ features[i]
        top = sims.topk(3).indices.tolist()
        chosen = [j for j in top if labels[j] == classes[i]]
        if not chosen:
            without_vote += 1
            chosen = [max((j for j in range(len(bank)) if labels[j] == classes[i]), key=lambda j: float(sims[j]))]
        weights = torch.stack([(sims[j] / 0.07).exp() for j in chosen])
        for n in range(tokens.shape[1]):
            cosines = torch.stack([tokens[i, n] @ bank[j] for j in chosen])
            expected = float((weights * cosines).sum() / weights.sum())
            assert abs(float(maps[i, 0].flatten()[n]) - expected) < 1e-5
    assert without_vote > 0 and torch.equal(maps[:, 0], maps[:, 1])


def test_a_bank_of_any_size_survives_the_checkpoint_round_trip() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=12)
    method = _fitted(source)
    buffer = io.BytesIO()
    torch.save(method.state_dict(), buffer)
    torch.manual_seed(9)
    restored = build_method("knn", source.context(J, seed=9)).eval()
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    batch = source.batch(torch.arange(1, 20, 2))
    assert restored.bank.shape == (24, source.dim)
    assert torch.equal(restored.logits(batch), method.logits(batch))
