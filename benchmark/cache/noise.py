"""The stability metric's input perturbation (docs/protocol/metrics.md, "Stability"): the noise added to each
normalised image of the noisy test view, the same for an image in any batch, order or run."""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import Tensor

#: docs/protocol/metrics.md, "Stability": clip(N(0, 0.2²), −0.25, 0.25) on the normalised image
NOISE_STD = 0.2
NOISE_CLIP = 0.25
#: the stability perturbation of every run is drawn from this seed, not the run's: every method and
#: seed is scored on the same perturbed images (paired comparisons; docs/protocol/harness.md)
STABILITY_NOISE_SEED = 0


def _noise_seed(seed: int, index: int) -> int:
    """A 63-bit generator seed for image ``index`` of a view seeded ``seed`` (no (seed, index) aliasing)."""
    digest = hashlib.sha256(f"stability-noise:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def stability_noise(shape: Sequence[int], *, seed: int, index: int) -> Tensor:
    """The stability perturbation of image ``index`` (docs/protocol/metrics.md): i.i.d. N(0, 0.2²) clipped to
    ±0.25, from a generator seeded by (seed, index), so it is the same in any batch or order."""
    generator = torch.Generator().manual_seed(_noise_seed(seed, index))
    return (torch.randn(tuple(shape), generator=generator) * NOISE_STD).clamp_(-NOISE_CLIP, NOISE_CLIP)
