"""Top-1 accuracy (%), as the paper reports it (first maximal logit wins ties, ``torch.argmax``)."""
from __future__ import annotations

import torch
from torch import Tensor


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """``100 * mean(argmax_c logits[i, c] == labels[i])`` over the N images.

    logits: (N, C) floating; labels: (N,) integer in ``[0, C)``.
    """
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"logits: expected a tensor of shape (N, C), got {shape}")
    n, c = logits.shape
    if n == 0 or c == 0:
        raise ValueError(f"logits: needs at least one image and one class, got shape {(n, c)}")
    if not isinstance(labels, Tensor) or labels.shape != (n,):
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels: expected shape ({n},) (one label per row of logits), got {shape}")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"labels: expected an integer tensor, got dtype {labels.dtype}")
    if int(labels.min()) < 0 or int(labels.max()) >= c:
        raise ValueError(f"labels: values must lie in [0, {c}) (columns of logits)")
    correct = logits.argmax(dim=1) == labels.to(device=logits.device, dtype=torch.int64)
    return 100.0 * float(correct.to(torch.float64).mean())


def logit_margins(logits: Tensor, labels: Tensor) -> Tensor:
    """(N,) float64 ``logits[i, y_i] - max_{c != y_i} logits[i, c]``: > 0 iff image i is
    classified correctly (ties aside); +inf with a single class."""
    logits = logits.double()
    own = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.scatter(1, labels[:, None], float("-inf")).amax(dim=1)
    return own - others
