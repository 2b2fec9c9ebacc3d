"""The per-epoch validation score of a tuning trial (``tune --prune``, docs/guides/tuning.md).

After each epoch the runner scores the method on the validation rows of the training split's
token-cache entry (head only: the trunk's tokens come from the entry) and hands the accuracy to
an :data:`EpochScoreHook`, which may stop training by raising :class:`Pruned`. Only a run given a
hook scores anything per epoch: a run without one pays nothing. Scoring leaves the run's path
unchanged: the module's train/eval mode and the torch RNG are restored, so a trial that is not
pruned trains exactly as it would without the hook.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from benchmark.cache.tokens import TokenSource
from benchmark.run.training import TrainingInterrupted
from methods.base import PrototypeMethod
from methods.common.precision import autocast
from metrics import accuracy

#: called after each epoch with (1-based global epoch, validation accuracy in %); raises Pruned to stop
EpochScoreHook = Callable[[int, float], None]


class Pruned(TrainingInterrupted):
    """Raised by an :data:`EpochScoreHook`: the trial stops after ``epoch`` (it writes no
    ``result.json``; the runner leaves ``pruned.json`` instead)."""

    def __init__(self, epoch: int, score: float) -> None:
        super().__init__(epoch)
        self.score = score

    def __str__(self) -> str:
        return f"pruned after epoch {self.epoch} at validation accuracy {self.score:.2f}"


@torch.no_grad()
def validation_accuracy(method: PrototypeMethod, source: TokenSource, *, batch_size: int, device: torch.device,
                        precision: str) -> float:
    """``metrics.accuracy`` of the method's logits over every row of ``source``, in row order and
    batches of ``batch_size`` under the run's ``precision``, as the final evaluation computes them
    (benchmark/run/prediction.py), so the last epoch's score is the trial's validation accuracy."""
    was_training = method.training
    method.eval()
    rows = torch.arange(len(source))
    logits = []
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for start in range(0, len(rows), batch_size):
                batch = source.batch(rows[start:start + batch_size], device, reads=method.reads)
                with autocast(precision, device):
                    logits.append(method.logits(batch).float().cpu())
    finally:
        method.train(was_training)
    return accuracy(torch.cat(logits), source.labels)
