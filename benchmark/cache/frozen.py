"""Per-image features a method derives from frozen trunk outputs alone, computed once per image.

A method's ``frozen_features(batch)`` (``methods/base.py``) depends only on the cached trunk
outputs of the batch and its fixed hyperparameters (vMFProto's foreground gate: an
eigendecomposition per image). Computing it at every step repeats identical work every epoch;
``with_frozen_features`` instead computes it in one pass over the split, in dataset order and in
batches of the evaluation batch size, keeps the result on the device and attaches the rows of
every later batch as ``batch.frozen``. The harness stays method-agnostic: it stores whatever
named tensors the method returns.

A live source (``cache = false``) reruns the trunk at every step, and a pass for the features
would cost a whole extra trunk pass: its batches get their features as they are loaded instead
(:class:`WithLiveFrozenFeatures`, on the prefetch thread towards CUDA), so that no training step
computes them (the gate reads the device to size its eigenproblems: docs/guides/gpu.md, "Host syncs per
training step").
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor

from benchmark.cache.tokens import LiveTokens, TokenSource
from methods.base import TOKEN_FIELDS, TokenBatch
from methods.common.transfer import to_device

FeatureFunction = Callable[[TokenBatch], dict[str, Tensor]]


class _WithFeatures(TokenSource, ABC):
    """``source`` whose batches carry the method's per-image features in ``frozen``."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source
        self.labels = source.labels
        self.grid = source.grid

    def __len__(self) -> int:
        return len(self.source)

    def batch(self, indices: Tensor, device: torch.device | str, *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        batch = self.source.batch(indices, device, reads=reads)
        batch.frozen = self.features_of(batch, indices, device)
        return batch

    @abstractmethod
    def features_of(self, batch: TokenBatch, indices: Tensor, device: torch.device | str) -> dict[str, Tensor]: ...


class WithFrozenFeatures(_WithFeatures):
    """``source`` whose batches carry ``features`` (name → N×… tensor on the device) in ``frozen``."""

    def __init__(self, source: TokenSource, features: dict[str, Tensor]) -> None:
        super().__init__(source)
        self.features = features

    def features_of(self, batch: TokenBatch, indices: Tensor, device: torch.device | str) -> dict[str, Tensor]:
        return {name: values[to_device(indices, values.device)].to(device) for name, values in self.features.items()}


class WithLiveFrozenFeatures(_WithFeatures):
    """A live ``source`` whose batches carry ``compute(batch)`` in ``frozen``, computed when the
    batch is loaded."""

    def __init__(self, source: LiveTokens, compute: FeatureFunction) -> None:
        super().__init__(source)
        self.compute = compute

    def features_of(self, batch: TokenBatch, indices: Tensor, device: torch.device | str) -> dict[str, Tensor]:
        with torch.no_grad():
            return {name: values.detach() for name, values in self.compute(batch).items()}


def compute_frozen_features(
    source: TokenSource, compute: FeatureFunction, *, batch_size: int, device: torch.device | str
) -> dict[str, Tensor]:
    """``compute`` over every image of ``source`` in dataset order, batch by batch, concatenated
    (name → N×… tensor on ``device``); {} when it returns nothing."""
    parts: dict[str, list[Tensor]] = {}
    order = torch.arange(len(source))
    with torch.no_grad():
        for start in range(0, len(source), batch_size):
            computed = compute(source.batch(order[start : start + batch_size], device))
            if not computed:
                return {}
            for name, values in computed.items():
                parts.setdefault(name, []).append(values.detach())
    return {name: torch.cat(values) for name, values in parts.items()}


def with_frozen_features(
    source: TokenSource, compute: FeatureFunction, *, batch_size: int, device: torch.device | str
) -> TokenSource:
    """``source`` with ``compute``'s per-image features precomputed (a live source: computed as
    each batch is loaded); unchanged when the method has none."""
    if isinstance(source, LiveTokens):
        return WithLiveFrozenFeatures(source, compute)
    features = compute_frozen_features(source, compute, batch_size=batch_size, device=device)
    return WithFrozenFeatures(source, features) if features else source
