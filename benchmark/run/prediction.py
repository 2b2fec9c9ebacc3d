"""Forward passes of a trained method over a token source: logits, each image's ground-truth-class
activation maps and, on request, its prototypes' contributions and the logits with prototypes
switched off (:func:`predict`), the appended block run once per batch for all of them
(:func:`block_output_reused`). Used by the evaluation and by the metrics beyond the paper."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from benchmark.cache.tokens import TokenSource
from methods.base import PrototypeMethod
from methods.common.precision import autocast
from metrics.deletion import DELETION_SEED, deletion_masks


@dataclass
class Contributions:
    """Per image: the contributions of its ground-truth and predicted class's prototypes, and the
    logits with the top-k / k random ground-truth prototypes switched off (None without deletion)."""

    truth: torch.Tensor  # N×J
    predicted: torch.Tensor  # N×J
    logits_top: torch.Tensor | None  # N×C
    logits_random: torch.Tensor | None  # N×C
    predicted_maps: torch.Tensor  # N×J×H×W of each image's predicted class (SID@k)


@dataclass
class Predictions:
    logits: torch.Tensor  # N×C
    labels: torch.Tensor  # N
    maps: torch.Tensor  # N×J×H×W of each image's ground-truth class
    contributions: Contributions | None = None


@contextmanager
def block_output_reused(method: PrototypeMethod) -> Iterator[None]:
    """While inside (evaluation, no gradients), the appended block returns its last output again
    when called on the same, unmodified input tensor: logits and maps of one batch share one
    block pass. Nothing changes for a method without an appended block."""
    block = method.appended_block()
    if block is None:
        yield
        return
    forward = block.forward
    last: dict[str, Any] = {}

    def reusing_forward(x: torch.Tensor) -> torch.Tensor:
        if last.get("input") is x and last["version"] == x._version:
            return last["output"]
        output = forward(x)
        last.update(input=x, version=x._version, output=output)
        return output

    block.forward = reusing_forward  # an instance attribute: nn.Module.__call__ finds it first
    try:
        yield
    finally:
        del block.forward


@torch.no_grad()
def predict(method: PrototypeMethod, source: TokenSource, *, batch_size: int, device: torch.device,
            with_logits: bool = True, precision: str = "fp32", contributions: bool = False,
            deletion_k: int | None = None) -> Predictions:
    """Logits and GT-class activation maps for every image of ``source`` (kept on the CPU, float32).
    ``contributions``: also the :class:`Contributions` (with ``deletion_k``: the logits with the
    top-k and k random ground-truth prototypes switched off; the random ones drawn from
    ``DELETION_SEED`` in image order, so every method and seed switches off the same ones)."""
    method.eval()
    generator = torch.Generator().manual_seed(DELETION_SEED)
    rows: dict[str, list[torch.Tensor]] = {"logits": [], "maps": [], "truth": [], "predicted": [], "top": [],
                                           "random": [], "predicted_maps": []}
    order = torch.arange(len(source))
    for start in range(0, len(order), batch_size):
        batch = source.batch(order[start:start + batch_size], device, reads=method.reads)
        with block_output_reused(method), autocast(precision, device):
            logits = method.logits(batch) if with_logits or contributions else None
            rows["maps"].append(method.activation_maps(batch, batch.labels).float().cpu())
            if contributions:
                truth = method.prototype_contributions(batch, batch.labels)
                rows["truth"].append(truth.float().cpu())
                predicted = logits.argmax(dim=1)
                rows["predicted"].append(method.prototype_contributions(batch, predicted).float().cpu())
                rows["predicted_maps"].append(method.activation_maps(batch, predicted).float().cpu())
                if deletion_k is not None:
                    top, drawn = deletion_masks(truth.float(), deletion_k, generator)
                    rows["top"].append(method.logits_without(batch, batch.labels, top).float().cpu())
                    rows["random"].append(method.logits_without(batch, batch.labels, drawn).float().cpu())
        if with_logits:
            rows["logits"].append(logits.float().cpu())
    joined = {name: torch.cat(values) if values else None for name, values in rows.items()}
    return Predictions(
        logits=joined["logits"] if joined["logits"] is not None else torch.empty(0),
        labels=source.labels.clone(),
        maps=joined["maps"],
        contributions=Contributions(joined["truth"], joined["predicted"], joined["top"], joined["random"],
                                    joined["predicted_maps"])
        if contributions else None,
    )


@torch.no_grad()
def global_features(method: PrototypeMethod, source: TokenSource, *, batch_size: int, device: torch.device,
                    precision: str = "fp32") -> torch.Tensor:
    """N×K float32 (CPU): ``method.global_features`` of every image of ``source``, in order."""
    method.eval()
    order = torch.arange(len(source))
    rows = []
    for start in range(0, len(order), batch_size):
        batch = source.batch(order[start:start + batch_size], device, reads=method.reads)
        with block_output_reused(method), autocast(precision, device):
            rows.append(method.global_features(batch).float().cpu())
    return torch.cat(rows)
