"""Datasets of the benchmark (docs/protocol/harness.md, "Datasets"): CUB-200-2011, the synthetic
``synthbirds`` (CUB layout), Stanford Dogs, Stanford Cars, NABirds and PartImageNet (with small
synthetic sets in their layouts), with the shared evaluation preprocessing and the optional
offline augmentation. Importing the package loads nothing: each name below loads its module on
first use, so ``benchmark.data.synthbirds`` (numpy, PIL) and ``benchmark.data.declared`` read
without torch.

    >>> from benchmark.data import generate_synthbirds, load_dataset
    >>> root = generate_synthbirds("data/synthbirds", classes=10, images_per_class=30, seed=0)
    >>> test = load_dataset("synthbirds", root, "test")
    >>> image, label, index = test[0]          # 3×224×224 normalised, int, int
"""
from __future__ import annotations

import importlib
from typing import Any

#: public name → the module that defines it (PEP 562: loaded on first use)
_HOMES = {
    "AUGMENTATION_SEED": "benchmark.data.augment", "OfflineAugmentedDataset": "benchmark.data.augment",
    "ImageDataset": "benchmark.data.dataset", "PartAnnotations": "benchmark.data.dataset",
    "PartPolygons": "benchmark.data.dataset", "NABIRDS_DEFAULTS": "benchmark.data.synthetic_nabirds",
    "generate_nabirds": "benchmark.data.synthetic_nabirds",
    "PARTIMAGENET_DEFAULTS": "benchmark.data.synthetic_partimagenet",
    "generate_partimagenet": "benchmark.data.synthetic_partimagenet",
    "check_images": "benchmark.data.dataset", "SYNTHBIRDS_DEFAULTS": "benchmark.data.synthbirds",
    "ensure_synthbirds": "benchmark.data.synthbirds", "generate_synthbirds": "benchmark.data.synthbirds",
    "DATASETS": "benchmark.data.declared", "load_dataset": "benchmark.data.loading",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'benchmark.data' has no attribute {name!r}")
