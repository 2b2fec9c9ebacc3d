"""vMFProto's foreground gate is computed once per image by the harness (``frozen_features``):
the same boolean masks and fallback counts as the per-step computation, the same training."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmark.cache.frozen import WithFrozenFeatures, WithLiveFrozenFeatures, with_frozen_features
from benchmark.cache.tokens import LiveTokens, TokenSource
from benchmark.config import RunSpec
from benchmark.run.prepare import Prepared, prepare
from benchmark.run.steps import SourceTrainData
from benchmark.run.training import epoch_order, train
from methods.base import TOKEN_FIELDS, TokenBatch
from methods.vmfproto.gating import GATING_VARIANTS, foreground_mask

BATCH = 8


def synthbirds(tmp_path: Path, **method_args: object) -> Prepared:
    spec = RunSpec(dataset="synthbirds", data_root=str(tmp_path / "sb"), backbone="dinov2_vits14_reg4",
                   weights="random", image_size=112, backbone_args={"depth": 2, "embed_dim": 32, "num_heads": 2},
                   dataset_args={"classes": 3, "images_per_class": 10, "seed": 0}, method="vmfproto",
                   prototypes_per_class=2, method_args=method_args, batch_size=BATCH, eval_batch_size=16)
    return prepare(spec)


@pytest.mark.parametrize("gating", [g for g in GATING_VARIANTS if g != "none"])
def test_precomputed_masks_equal_the_per_step_masks_of_every_image(tmp_path: Path, gating: str) -> None:
    prep = synthbirds(tmp_path, gating=gating)
    method = prep.method
    train_src = prep.train_source(tmp_path / "cache")
    clean, noisy = prep.test_sources(tmp_path / "cache")
    for source in (train_src, clean, noisy):
        assert isinstance(source, WithFrozenFeatures)
        # today's per-step computation: the gate of each shuffled training batch, from its own tokens
        for epoch in range(2):
            order = epoch_order(len(source), seed=0, epoch=epoch)
            for start in range(0, len(order), BATCH):
                batch = source.batch(order[start:start + BATCH], "cpu")
                mask, fallback = foreground_mask(batch.tokens, batch.attention, method.gating, method.tau)
                assert torch.equal(batch.frozen["foreground"], mask)
                assert torch.equal(batch.frozen["foreground_fallback"], fallback)
                assert torch.equal(method.foreground(batch), mask)  # the method reads the stored gate


class Constant(TokenSource):
    """Four images; 1 and 3 have constant tokens and attention, so their gate falls back."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randn(4, 4, 8, generator=generator)
        self.attention = torch.rand(4, 4, generator=generator)
        self.tokens[1::2] = 1.0
        self.attention[1::2] = 0.25
        self.labels = torch.tensor([0, 1, 0, 1])
        self.grid = (2, 2)

    def __len__(self) -> int:
        return 4

    def batch(self, indices: torch.Tensor, device: torch.device | str, *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        return TokenBatch(self.tokens[indices], torch.ones(len(indices), 5, 8), self.attention[indices],
                          self.labels[indices], indices, self.grid).only(reads)


def test_fallback_images_are_counted_once_per_image_from_the_stored_gate(tmp_path: Path) -> None:
    prep = synthbirds(tmp_path)
    method, source = prep.method, Constant()
    wrapped = with_frozen_features(source, method.frozen_features, batch_size=3, device="cpu")
    assert wrapped.features["foreground_fallback"].tolist() == [False, True, False, True]
    cpu = torch.device("cpu")
    stored = method.diagnostics({"train": SourceTrainData(wrapped, cpu, 0)})
    computed = method.diagnostics({"train": SourceTrainData(source, cpu, 0)})  # gate computed in place
    assert stored["gating_fallback_images"] == computed["gating_fallback_images"] == {"train": 2}
    assert stored["foreground_fraction"] == computed["foreground_fraction"]


class LiveConstant(LiveTokens):
    """A live source (no trunk: the batches of :class:`Constant`) that counts its trunk passes."""

    def __init__(self) -> None:
        self.constant, self.labels, self.grid, self.passes = Constant(), Constant().labels, (2, 2), 0

    def batch(self, indices: torch.Tensor, device: torch.device | str, *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        self.passes += 1
        return self.constant.batch(indices, device, reads=reads)


def test_featureless_methods_are_left_alone_and_live_batches_get_their_features_as_loaded(tmp_path: Path) -> None:
    source = Constant()
    assert with_frozen_features(source, lambda batch: {}, batch_size=2, device="cpu") is source
    method, live = synthbirds(tmp_path).method, LiveConstant()
    wrapped = with_frozen_features(live, method.frozen_features, batch_size=2, device="cpu")
    assert isinstance(wrapped, WithLiveFrozenFeatures) and live.passes == 0  # no extra trunk pass
    batch = wrapped.batch(torch.tensor([3, 0, 1]), "cpu", reads=method.reads)
    mask, fallback = foreground_mask(batch.tokens, batch.attention, method.gating, method.tau)
    assert live.passes == 1 and fallback.tolist() == [True, False, True]
    assert torch.equal(batch.frozen["foreground"], mask) and torch.equal(batch.frozen["foreground_fallback"], fallback)


def test_training_on_the_stored_gate_is_identical(tmp_path: Path) -> None:
    trained = []
    for precomputed in (True, False):
        prep = synthbirds(tmp_path, discovery_epochs=1, end_to_end_epochs=1)
        source = prep.train_source(tmp_path / "cache")
        assert isinstance(source, WithFrozenFeatures)
        train(prep.method, source if precomputed else source.source, seed=0, batch_size=BATCH,
              device=torch.device("cpu"), checkpoint_path=None, log=lambda line: None)
        trained.append(prep.method.state_dict())
    stored, per_step = trained
    assert stored.keys() == per_step.keys()
    for name in stored:
        a, b = stored[name], per_step[name]
        if isinstance(a, dict):  # the method's generator state (extra state)
            assert all(torch.equal(a[k], b[k]) for k in a), name
        else:
            assert torch.equal(a, b), name
