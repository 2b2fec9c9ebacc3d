"""ProtoPNet with ``similarity = "cosine"`` against a reference written from ProtoPNeXt's behaviour
(``lmoffett/protopnext`` @ 77cd717): ``CosPrototypeActivation`` as a conv2d on the B×K×H×W
layout in the official order of operations, the cluster/separation costs on similarities with
their signs, the projection, and the adapter contract; the ``"l2"`` path is unchanged."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmark.run.training import total_loss
from methods.common.cosine import cluster_similarity, cosine_activation, separation_similarity
from methods.common.lineage import masked_l1
from methods.contract import check_method
from methods.protopnet import ProtoPNet, log_similarity, squared_distances
from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData


class CosineProtoPNet(ProtoPNet):
    """ProtoPNet whose default similarity is cosine, for the contract battery (an import path).
    Its ``**overrides`` hide ProtoPNet's hyperparameters from the contract, so it declares no
    search space (a grid tunes cosine ProtoPNet as ``protopnet`` with ``similarity = "cosine"``)."""

    search_space = {}

    def __init__(self, ctx, **overrides) -> None:
        super().__init__(ctx, **{"similarity": "cosine", **overrides})


def reference_activation(x: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    """CosPrototypeActivation: x B×K×H×W, prototypes M×K×1×1; x scaled by 64/‖x‖ (ε inside the
    root), p by 1/(‖p‖ + ε) with ε inside the root too, conv2d, ÷ (64 · 1.01), ReLU."""
    eps, constant = 1e-4, 64.0
    x_norm = torch.sqrt((x ** 2).sum(dim=1, keepdim=True) + eps)
    x_hat = constant * x / x_norm
    p_norm = torch.sqrt((prototypes ** 2).sum(dim=1, keepdim=True) + eps)
    p_hat = prototypes / (p_norm + eps)
    return torch.relu(F.conv2d(x_hat, p_hat) / (constant * 1.01))


def _ours(x: torch.Tensor, prototypes: torch.Tensor) -> torch.Tensor:
    B, K, H, W = x.shape
    return cosine_activation(x.flatten(2).transpose(1, 2), prototypes.flatten(1)).view(B, -1, H, W)


def test_activation_equals_the_official_conv2d_form() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 8, 4, 5, generator=g)
    x[0, :, 0, 0] = 0.0  # x = 0: s = 0, no NaN
    p = torch.randn(6, 8, 1, 1, generator=g)
    p[1] = -x[1, :, 2, 3, None, None]  # antiparallel: ReLU sends it to 0
    p[2] = x[2, :, 1, 1, None, None]  # x = p: ≈ 1/1.01
    p[3] = torch.full((8, 1, 1), 1e-3)  # ‖p‖² ≈ ε: where the second ε matters
    expected, ours = reference_activation(x, p), _ours(x, p)
    assert (ours - expected).abs().max() < 1e-6
    assert float(ours[0, :, 0, 0].abs().max()) == 0 and bool(torch.isfinite(ours).all())
    assert float(ours[1, 1, 2, 3]) == 0
    assert float(ours[2, 2, 1, 1]) == pytest.approx(1 / 1.01, rel=1e-4)
    assert (_ours(x, 10 * p) - ours)[:, [0, 4, 5]].abs().max() < 1e-4  # scale-free up to ε


def test_cluster_and_separation_equal_the_mask_multiply_max() -> None:
    pooled = torch.rand(5, 6)
    labels = torch.tensor([0, 1, 2, 0, 1])
    own = (torch.arange(6) // 2)[None, :] == labels[:, None]
    assert float(cluster_similarity(pooled, labels, 2)) == pytest.approx(float((pooled * own).max(1).values.mean()))
    assert float(separation_similarity(pooled, labels, 2)) == pytest.approx(float((pooled * ~own).max(1).values.mean()))
    zero_own = pooled.masked_fill(own, 0.0)
    assert float(cluster_similarity(zero_own, labels, 2)) == 0.0


def test_total_loss_is_ce_minus_clst_plus_sep_on_similarities() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    torch.manual_seed(0)
    method = build_method("protopnet", source.context(2), similarity="cosine")
    assert method.loss_weights == {"ce": 1.0, "clst": -0.8, "sep": 0.08, "l1": 1e-4}
    batch = source.batch(torch.arange(8))
    stage = method.stages()[1]
    ours = total_loss(method, method.loss_terms(batch, stage, 5), stage, 5)
    latent = method.add_on(batch.tokens)
    x = latent.transpose(1, 2).reshape(8, -1, *batch.grid)
    S = reference_activation(x, method.prototypes[:, :, None, None]).flatten(2).amax(-1)
    own = (torch.arange(6) // 2)[None, :] == batch.labels[:, None]
    expected = (F.cross_entropy(S @ method.last_layer.weight.T, batch.labels) - 0.8 * (S * own).amax(1).mean()
                + 0.08 * (S * ~own).amax(1).mean())
    assert abs(float((ours - expected).detach())) < 1e-6
    assert float(masked_l1(method.last_layer.weight, 2)) == pytest.approx(0.5 * 6 * 2)  # l1 as in ProtoPNet


def test_push_copies_the_raw_latent_of_the_most_similar_own_class_patch() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    torch.manual_seed(0)
    method = build_method("protopnet", source.context(2), similarity="cosine").eval()
    data = SyntheticTrainData(source, batch_size=5)
    with torch.no_grad():
        latent = method.add_on(source.tokens)
        scores = cosine_activation(latent, method.prototypes)
        method.push(data)
    for p in range(6):
        members = (source.labels == p // 2).nonzero().flatten()
        flat = scores[members, p].flatten()
        best = int(flat.argmax())  # first maximum: image, then row-major position
        image, position = members[best // 36], best % 36
        assert int(method.push_image[p]) == int(image) and int(method.push_position[p]) == position
        assert torch.equal(method.prototypes[p], latent[image, position])


def test_the_l2_path_is_todays_protopnet() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    torch.manual_seed(0)
    method = build_method("protopnet", source.context(2)).eval()
    batch = source.batch(torch.arange(8))
    with torch.no_grad():
        d = squared_distances(method.add_on(batch.tokens), method.prototypes)
        assert torch.equal(method.logits(batch), method.last_layer(log_similarity(d.amin(-1))))
    assert method.loss_weights == {"ce": 1.0, "clst": 0.8, "sep": -0.08, "l1": 1e-4}
    with pytest.raises(ValueError, match="similarity"):
        build_method("protopnet", source.context(2), similarity="dot")


def test_cosine_protopnet_passes_the_adapter_contract() -> None:
    check_method("test_protopnet_cosine:CosineProtoPNet")
