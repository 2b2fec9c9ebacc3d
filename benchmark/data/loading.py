"""Reading a dataset's split by name (the one door: ``load_dataset``)."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from benchmark.data.declared import dataset_declaration, known_datasets
from benchmark.data.cars import read_cars
from benchmark.data.cub import read_cub
from benchmark.data.dataset import ImageDataset, check_split
from benchmark.data.dogs import read_dogs
from benchmark.data.funnybirds import read_funnybirds
from benchmark.data.nabirds import read_nabirds
from benchmark.data.partimagenet import read_partimagenet
from benchmark.errors import ProtobenchError

_READERS: dict[str, Callable[[Path, str, int], ImageDataset]] = {
    "cub": lambda root, split, size: read_cub(root, split, name="cub", image_size=size),
    "synthbirds": lambda root, split, size: read_cub(root, split, name="synthbirds", image_size=size),
    "dogs": lambda root, split, size: read_dogs(root, split, image_size=size),
    "cars": lambda root, split, size: read_cars(root, split, image_size=size),
    "nabirds": lambda root, split, size: read_nabirds(root, split, image_size=size),
    "partimagenet": lambda root, split, size: read_partimagenet(root, split, image_size=size),
    "funnybirds": lambda root, split, size: read_funnybirds(root, split, image_size=size),
}


def load_dataset(name: str, root: str | Path, split: str, *, image_size: int = 224) -> ImageDataset:
    """Read split ``"train"`` or ``"test"`` of dataset ``name`` (a built-in, or one an installed
    package declares: its ``loader``) from ``root``."""
    reader = _READERS.get(name) or _installed_reader(name)
    check_split(name, split)
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ProtobenchError(f"Dataset root {root} for {name} is not a folder; pass the folder the dataset was extracted to.")
    dataset = reader(root, split, image_size)
    if not isinstance(dataset, ImageDataset):
        raise ProtobenchError(f"dataset {name!r}: its loader returned a {type(dataset).__name__}, not a "
                              "benchmark.data.dataset.ImageDataset; fix the package's loader")
    return dataset


def _installed_reader(name: str) -> Callable[[Path, str, int], ImageDataset]:
    """The loader of an installed package's dataset (entry point ``protobench.datasets``)."""
    try:
        found = dataset_declaration(name)
    except ValueError as err:
        raise ProtobenchError(str(err)) from None
    if found is None or not found[0].loader:
        raise ProtobenchError(f"Unknown dataset {name!r}; use one of {', '.join(known_datasets())}.")
    module, _, attr = found[0].loader.partition(":")
    try:
        loader = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ProtobenchError(f"dataset {name!r} of {found[1].label()}: its loader {found[0].loader!r} does not "
                              f"import ({err}); fix or reinstall that package") from None
    return lambda root, split, size: loader(root, split, image_size=size)
