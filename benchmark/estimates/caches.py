"""The token-cache entries a grid reads: one per trunk × dataset × split × view, shared by every
run that reads it, with its size from the entry's layout."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from benchmark.cache.sizing import cache_entry_bytes
from benchmark.cache.noise import STABILITY_NOISE_SEED
from benchmark.config import RunSpec
from benchmark.data.augment import AUGMENTATION_SEED
from benchmark.estimates.workload import augmentation_factor, intervention_images, split_images, trunk_macs
from benchmark.method_lookup import declaration


# ---- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheNeed:
    """One token-cache entry the grid reads (backbone × dataset × split × view) and its size."""

    backbone: str
    dataset: str
    split: str
    view: str  # "clean" | "noise seed S" | "offline40 seed S" (S: the fixed augmentation seed)
    early_tokens: bool
    images: int
    image_size: int
    dtype: str
    bytes: int  # the entry's files, from its layout (benchmark.cache.tokens.entry_layout)
    trunk_macs: float  # forward multiply-adds per image of the trunk that writes it (workload.trunk_macs)
    noise_seed: int | None = None  # the stability-noise view's seed; None: clean images

    @property
    def view_key(self) -> dict[str, Any]:
        """The view as an entry's manifest records it (``benchmark.cache.tokens.View.key``)."""
        return {"kind": "clean"} if self.noise_seed is None else {"kind": "noise", "seed": self.noise_seed}

def cache_needs(spec: RunSpec) -> list[tuple[tuple[Any, ...], CacheNeed]]:
    """The cache entries a run reads, each with the identity that decides sharing. Early-block
    tokens are stored for the training split only (``runner.needs_early_tokens``); the noise view
    is the fixed ``STABILITY_NOISE_SEED``'s, one entry per trunk and dataset."""
    if not spec.cache:
        return []
    early = spec.cache_early_tokens or declaration(spec.method).needs_early_tokens
    trunk = (spec.backbone, spec.weights_id or spec.weights, json.dumps(spec.backbone_args, sort_keys=True),
             spec.dataset, spec.data_root, json.dumps(spec.dataset_args, sort_keys=True), spec.image_size,
             spec.cache_dtype)
    views = [("train", "clean", split_images(spec, "train"), early, None),
             ("test", "clean", split_images(spec, "test"), False, None)]
    if spec.augmentation != "none":  # the epochs read the copies, push the clean split (runner.py)
        views.append(("train", f"{spec.augmentation} seed {AUGMENTATION_SEED}",
                      split_images(spec, "train") * augmentation_factor(spec.augmentation), early, None))
    if spec.has_part_annotations:
        views.append(("test", f"noise seed {STABILITY_NOISE_SEED}", split_images(spec, "test"), False,
                      STABILITY_NOISE_SEED))
    if spec.dataset == "funnybirds" and spec.evaluation_split == "test":  # the protocols' rendered interventions
        images, exact = intervention_images(spec)
        views.append(("test_interventions", "clean" if exact else "clean, ≥ (data absent)", images, False, None))
    return [((*trunk, split, view, with_early),
             CacheNeed(spec.backbone, spec.dataset, split, view, with_early, images, spec.image_size,
                       spec.cache_dtype, cache_entry_bytes(spec, images, with_early), trunk_macs(spec),
                       noise_seed))
            for split, view, images, with_early, noise_seed in views]

def grid_cache_needs(runs: Iterable[RunSpec]) -> list[tuple[CacheNeed, int]]:
    """Every distinct cache entry of ``runs``, with the number of runs reading it."""
    readers: Counter[tuple[Any, ...]] = Counter()
    needs: dict[tuple[Any, ...], CacheNeed] = {}
    for spec in runs:
        for key, need in cache_needs(spec):
            readers[key] += 1
            needs.setdefault(key, need)
    return [(needs[k], readers[k]) for k in needs]
