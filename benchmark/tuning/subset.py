"""Rows of a split read by index: the validation split and train-minus-validation are views of
the training split's token-cache entry and of its annotations, never a new trunk pass or a new
cache entry (docs/guides/tuning.md)."""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from benchmark.cache.tokens import TokenSource
from benchmark.data import ImageDataset
from methods.base import TOKEN_FIELDS, TokenBatch


class RowSubset(TokenSource):
    """The rows ``rows`` of ``source`` as a split of its own: position ``i`` is row ``rows[i]``, and a
    batch's ``indices`` are positions in the subset (what methods index their per-image state by)."""

    def __init__(self, source: TokenSource, rows: np.ndarray) -> None:
        self.source = source
        self.rows = torch.as_tensor(np.asarray(rows), dtype=torch.int64)
        self.labels = source.labels[self.rows]
        self.grid = source.grid

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, indices: Tensor, device: torch.device | str, *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        batch = self.source.batch(self.rows[indices.detach().cpu()], device, reads=reads)
        return replace(batch, indices=indices.to(batch.labels.device))


def augmented_rows(base_rows: np.ndarray, per_image: int) -> np.ndarray:
    """Rows of an offline-augmented split made from ``base_rows`` of its base: base image ``i`` owns
    rows ``i·per_image … (i+1)·per_image − 1`` (benchmark.data.augment.OfflineAugmentedDataset)."""
    base_rows = np.asarray(base_rows, dtype=np.int64)
    return (base_rows[:, None] * per_image + np.arange(per_image)[None, :]).reshape(-1)


def dataset_rows(dataset: ImageDataset, rows: np.ndarray, split: str) -> ImageDataset:
    """``dataset`` restricted to ``rows`` (labels, image paths and part annotations alike), named
    ``split``: what the metrics of a trial read. Its images are never decoded for tokens (the
    tokens come from the training split's entry through :class:`RowSubset`)."""
    rows = np.asarray(rows, dtype=np.int64)
    subset = copy.copy(dataset)
    subset.split = split
    subset.labels = dataset.labels[rows]
    subset.image_paths = [dataset.image_paths[r] for r in rows]
    ann = dataset.annotations
    if ann is not None:
        subset.annotations = replace(ann, boxes=ann.boxes[rows], part_xy=ann.part_xy[rows],
                                     part_visible=ann.part_visible[rows],
                                     segmentation_paths=[ann.segmentation_paths[r] for r in rows])
    if dataset.part_polygons is not None:
        subset.part_polygons = replace(dataset.part_polygons,
                                       polygons=[dataset.part_polygons.polygons[r] for r in rows])
    if dataset.part_maps is not None:
        subset.part_maps = replace(dataset.part_maps, paths=[dataset.part_maps.paths[r] for r in rows])
    if dataset.image_sizes is not None:
        subset.image_sizes = dataset.image_sizes[rows]
    subset._fingerprint = f"{dataset.fingerprint()}:{split}"
    return subset
