"""Reading a dataset's split by name (the one door: ``load_dataset``)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmark.config import DATASET_NAMES as DATASETS
from benchmark.data.cars import read_cars
from benchmark.data.cub import read_cub
from benchmark.data.dataset import ImageDataset, check_split
from benchmark.data.dogs import read_dogs
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
