"""Prototype contributions (the figures' "why" panels) add up to the logit they explain."""
import pytest
import torch

from methods.registry import build_method
from methods.testing import SyntheticTokens

SOURCE = SyntheticTokens(num_classes=4, images_per_class=4)
BATCH = SOURCE.batch(torch.arange(8))


def built(name):
    torch.manual_seed(0)
    return build_method(name, SOURCE.context(3)).eval()


@pytest.mark.parametrize("name", ["vmfproto", "evalprotopnet", "mgproto", "nppp"])
def test_contributions_sum_to_the_logit(name):
    method = built(name)
    with torch.no_grad():
        logits = method.logits(BATCH)
        parts = method.prototype_contributions(BATCH, BATCH.labels)
    own = logits[torch.arange(len(BATCH)), BATCH.labels]
    torch.testing.assert_close(parts.sum(-1), own, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["protopnet", "tesnet", "deformable_protopnet"])
def test_last_layer_contributions_are_the_own_class_terms(name):
    method = built(name)
    with torch.no_grad():
        logits = method.logits(BATCH)
        parts = method.prototype_contributions(BATCH, BATCH.labels)
        # brute force: zero every other prototype's last-layer weight, the logit is then Σ own terms
        J = method.prototypes_per_class
        rows = torch.arange(len(BATCH))
        for b in rows:
            c = int(BATCH.labels[b])
            weight = method.last_layer.weight.clone()
            keep = torch.zeros_like(weight)
            keep[:, c * J:(c + 1) * J] = 1
            method.last_layer.weight.copy_(weight * keep)
            only_own = method.logits(BATCH)[b, c]
            method.last_layer.weight.copy_(weight)
            torch.testing.assert_close(parts[b].sum(), only_own, rtol=1e-5, atol=1e-5)
    assert logits.shape == (len(BATCH), 4)
