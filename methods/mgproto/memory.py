"""MGProto's per-class FIFO memory bank of latent features (official ``utils/memory.py``
``MemoryBank`` and the enqueue in model.py ``forward``), kept in buffers so that a state-dict
round trip restores it."""
from __future__ import annotations

import torch
from torch import Tensor, nn


def unique_top1_features(latent: Tensor, positions: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The features to enqueue for one batch (model.py ``forward``): for every image, the latent
    vector at each grid position that is the top-1 position of at least one of its ground-truth
    class's prototypes, once per position ("only enqueue unique feature vectors of a training
    sample"). ``latent`` B×N×d, ``positions`` B×J → (B·N×d features, B·N classes, B·N bool: the
    ones to enqueue), image-major and ascending positions within an image, as the official loop;
    fixed shapes, so no host synchronisation."""
    batch, patches = latent.shape[:2]
    chosen = torch.zeros(batch, patches, dtype=torch.bool, device=latent.device).scatter_(1, positions, True)
    return latent.flatten(0, 1), labels.unsqueeze(1).expand(-1, patches).flatten(), chosen.flatten()


class ClassMemoryBank(nn.Module):
    """``capacity`` features per class in a ring buffer: a push appends in order and, once the
    class is full, overwrites its oldest entries (first in, first out)."""

    def __init__(self, num_classes: int, capacity: int, dim: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.register_buffer("features", torch.zeros(num_classes, capacity, dim))
        self.register_buffer("size", torch.zeros(num_classes, dtype=torch.long))
        self.register_buffer("head", torch.zeros(num_classes, dtype=torch.long))  # next slot to write

    def full(self) -> bool:
        """Whether every class holds ``capacity`` features."""
        return bool((self.size == self.capacity).all())

    def contents(self, cls: int) -> Tensor:
        """The features of class ``cls``, oldest first."""
        size = int(self.size[cls])
        start = (int(self.head[cls]) - size) % self.capacity
        return self.features[cls, (start + torch.arange(size, device=self.features.device)) % self.capacity]

    @torch.no_grad()
    def push(self, features: Tensor, classes: Tensor, enqueue: Tensor | None = None) -> None:
        """Append the ``features`` (M×d) marked by ``enqueue`` (M bool, default all) to the queues of
        ``classes`` (M), in order. When one push brings more than ``capacity`` features of a class,
        only its last ``capacity`` are kept (the official code keeps a random subset; FIFO keeps this
        deterministic). Fixed shapes throughout (no host synchronisation): ranks from a stable sort,
        and the bank rewritten with ``torch.where`` from a map of which row lands in which slot."""
        if len(classes) == 0:  # a shape: known on the host
            return
        num_classes, capacity = self.size.shape[0], self.capacity
        rows = torch.arange(len(classes), device=classes.device)
        queued = torch.ones_like(classes, dtype=torch.bool) if enqueue is None else enqueue
        key = torch.where(queued, classes, num_classes)  # rows not enqueued sort last, in a bin of their own
        counts = torch.zeros(num_classes + 1, dtype=torch.long, device=classes.device).index_add_(
            0, key, torch.ones_like(key))
        order = torch.argsort(key, stable=True)
        first = counts.cumsum(0) - counts  # where each class's rows start in the sorted order
        rank = torch.empty_like(rows).scatter_(0, order, rows - first[key[order]])  # order among its class's rows
        counts = counts[:num_classes]
        dropped = (counts - capacity).clamp_min(0)[classes]
        keep = queued & (rank >= dropped)
        slot = classes * capacity + (self.head[classes] + rank - dropped) % capacity  # distinct among kept rows
        source = torch.zeros(num_classes * capacity, dtype=torch.long, device=classes.device).index_add_(
            0, slot, torch.where(keep, rows + 1, 0))  # 1 + the row written to each slot, 0: none
        bank = self.features.view(num_classes * capacity, -1)
        incoming = features[(source - 1).clamp_min(0)].to(bank.dtype)
        bank.copy_(torch.where((source > 0).unsqueeze(-1), incoming, bank))
        self.head.copy_((self.head + counts.clamp_max(capacity)) % capacity)
        self.size.copy_((self.size + counts).clamp_max(capacity))
