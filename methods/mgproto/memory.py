"""MGProto's per-class FIFO memory bank of latent features (official ``utils/memory.py``
``MemoryBank`` and the enqueue in model.py ``forward``), kept in buffers so that a state-dict
round trip restores it."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def unique_top1_features(latent: Tensor, positions: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """The features to enqueue for one batch (model.py ``forward``): for every image, the latent
    vector at each grid position that is the top-1 position of at least one of its ground-truth
    class's prototypes, once per position ("only enqueue unique feature vectors of a training
    sample"). ``latent`` B×N×d, ``positions`` B×J → (M×d features, M classes), image-major and
    ascending positions within an image, as the official loop."""
    chosen = torch.zeros(latent.shape[:2], dtype=torch.bool, device=latent.device)
    chosen.scatter_(1, positions, True)
    image, position = chosen.nonzero(as_tuple=True)
    return latent[image, position], labels[image]


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
    def push(self, features: Tensor, classes: Tensor) -> None:
        """Append ``features`` (M×d) to the queues of ``classes`` (M), in order. When one push
        brings more than ``capacity`` features of a class, only its last ``capacity`` are kept
        (the official code keeps a random subset; FIFO keeps this deterministic)."""
        if len(classes) == 0:
            return
        num_classes = self.size.shape[0]
        counts = torch.bincount(classes, minlength=num_classes)
        rank = F.one_hot(classes, num_classes).cumsum(0).gather(1, classes[:, None]).squeeze(1) - 1
        dropped = (counts - self.capacity).clamp_min(0)[classes]
        keep = rank >= dropped
        slot = (self.head[classes] + rank - dropped) % self.capacity
        self.features[classes[keep], slot[keep]] = features[keep].to(self.features.dtype)
        self.head.copy_((self.head + counts.clamp_max(self.capacity)) % self.capacity)
        self.size.copy_((self.size + counts).clamp_max(self.capacity))
