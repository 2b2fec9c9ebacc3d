"""Host tensors onto the device without a host synchronisation (docs/guides/gpu.md, "Host syncs per training step").

A blocking ``.to("cuda")`` of a CPU tensor waits for the copy, and so for every kernel queued
before it on the stream. From pinned memory with ``non_blocking=True`` the copy is queued like a
kernel and the host goes on; torch's caching host allocator keeps the pinned block until the
copy has run. Methods draw their random numbers on seeded CPU generators (the same draws on every
device) and hand them over with :func:`to_device`.
"""
from __future__ import annotations

import torch
from torch import Tensor


def to_device(tensor: Tensor, device: torch.device | str) -> Tensor:
    """``tensor`` on ``device``: from the CPU to CUDA a pinned, non-blocking copy; otherwise ``.to``."""
    device = torch.device(device)
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
