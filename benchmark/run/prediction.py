"""Forward passes of a trained method over a token source: logits and each image's
ground-truth-class activation maps (:func:`predict`), the appended block run once per batch for
both (:func:`block_output_reused`). Used by the evaluation and by the metrics beyond the paper."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from benchmark.cache.tokens import TokenSource
from methods.base import PrototypeMethod
from methods.common.precision import autocast


@dataclass
class Predictions:
    logits: torch.Tensor  # N×C
    labels: torch.Tensor  # N
    maps: torch.Tensor  # N×J×H×W of each image's ground-truth class


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
            with_logits: bool = True, precision: str = "fp32") -> Predictions:
    """Logits and GT-class activation maps for every image of ``source`` (kept on the CPU, float32)."""
    method.eval()
    logits, maps = [], []
    order = torch.arange(len(source))
    for start in range(0, len(order), batch_size):
        batch = source.batch(order[start:start + batch_size], device, reads=method.reads)
        with block_output_reused(method), autocast(precision, device):
            if with_logits:
                logits.append(method.logits(batch).float().cpu())
            maps.append(method.activation_maps(batch, batch.labels).float().cpu())
    return Predictions(
        logits=torch.cat(logits) if logits else torch.empty(0),
        labels=source.labels.clone(),
        maps=torch.cat(maps),
    )
