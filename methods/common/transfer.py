"""Host tensors onto the device without a host synchronisation (README, "Host syncs per training step").

A blocking ``.to("cuda")`` of a CPU tensor waits for the copy, and so for every kernel queued
before it on the stream. From pinned memory with ``non_blocking=True`` the copy is queued like a
kernel and the host goes on; torch's caching host allocator keeps the pinned block until the
copy has run. Methods draw their random numbers on seeded CPU generators (the same draws on every
device) and hand them over with :func:`to_device`.
"""
from __future__ import annotations

import torch
from torch import Tensor


def to_device(host: Tensor, device: torch.device | str) -> Tensor:
    """``host`` (a CPU tensor) on ``device``: a pinned, non-blocking copy towards CUDA; as is on a CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
