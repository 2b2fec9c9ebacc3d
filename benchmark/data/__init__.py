"""Datasets of the benchmark (docs/protocol/harness.md, "Datasets"): CUB-200-2011, the synthetic
``synthbirds`` (CUB layout), Stanford Dogs and Stanford Cars, with the shared evaluation
preprocessing and the optional offline augmentation.

    >>> from benchmark.data import generate_synthbirds, load_dataset
    >>> root = generate_synthbirds("data/synthbirds", classes=10, images_per_class=30, seed=0)
    >>> test = load_dataset("synthbirds", root, "test")
    >>> image, label, index = test[0]          # 3×224×224 normalised, int, int
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmark.config import DATASET_NAMES as DATASETS
from benchmark.data.augment import AUGMENTATION_SEED, OfflineAugmentedDataset
from benchmark.data.cars import read_cars
from benchmark.data.cub import read_cub
from benchmark.data.dataset import ImageDataset, PartAnnotations, check_images, check_split
from benchmark.data.dogs import read_dogs
from benchmark.data.synthbirds import SYNTHBIRDS_DEFAULTS, ensure_synthbirds, generate_synthbirds
from benchmark.errors import ProtobenchError

_READERS: dict[str, Callable[[Path, str, int], ImageDataset]] = {
    "cub": lambda root, split, size: read_cub(root, split, name="cub", image_size=size),
    "synthbirds": lambda root, split, size: read_cub(root, split, name="synthbirds", image_size=size),
    "dogs": lambda root, split, size: read_dogs(root, split, image_size=size),
    "cars": lambda root, split, size: read_cars(root, split, image_size=size),
}


def load_dataset(name: str, root: str | Path, split: str, *, image_size: int = 224) -> ImageDataset:
    """Read split ``"train"`` or ``"test"`` of dataset ``name`` (one of :data:`DATASETS`) from ``root``."""
    if name not in _READERS:
        raise ProtobenchError(f"Unknown dataset {name!r}; use one of {', '.join(DATASETS)}.")
    check_split(name, split)
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ProtobenchError(f"Dataset root {root} for {name} is not a folder; pass the folder the dataset was extracted to.")
    return _READERS[name](root, split, image_size)


__all__ = [
    "AUGMENTATION_SEED",
    "DATASETS",
    "ImageDataset",
    "OfflineAugmentedDataset",
    "PartAnnotations",
    "SYNTHBIRDS_DEFAULTS",
    "check_images",
    "ensure_synthbirds",
    "generate_synthbirds",
    "load_dataset",
]
