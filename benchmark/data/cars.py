"""Reader of the Stanford Cars devkit layout (full images, accuracy only; docs/protocol/harness.md).

Layout under ``root`` (or ``root/stanford_cars``, torchvision's ``StanfordCars`` folder)::

    cars_train/<fname>, cars_test/<fname>          the images
    devkit/cars_meta.mat                           class_names: 1×C cell of strings
    devkit/cars_train_annos.mat                    annotations: 1×N struct
    cars_test_annos_withlabels.mat                 annotations: 1×N struct, with class
        struct fields: bbox_x1, bbox_y1, bbox_x2, bbox_y2, class (1-based), fname

Each ``.mat`` file is looked for in ``devkit/`` first, then in the root. The boxes are not
used: the protocol evaluates on the full image.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmark.data.dataset import ImageDataset, check_images_exist, check_split
from benchmark.data.matfiles import (
    check_labels,
    first_existing,
    integers,
    load_mat,
    strings,
    struct_field,
)
from benchmark.errors import ProtobenchError

_FIX = (
    "download the Stanford Cars images and devkit (with cars_test_annos_withlabels.mat) "
    "and extract them into the dataset root"
)
_ANNOS = {"train": "cars_train_annos.mat", "test": "cars_test_annos_withlabels.mat"}


def _dataset_dir(root: Path) -> Path:
    nested = root / "stanford_cars"
    return nested if not (root / "devkit").is_dir() and nested.is_dir() else root


def read_cars(root: str | Path, split: str, *, image_size: int = 224) -> ImageDataset:
    """Read the ``"train"`` or ``"test"`` split of Stanford Cars."""
    check_split("cars", split)
    base = _dataset_dir(Path(root))
    images_dir = base / f"cars_{split}"
    if not images_dir.is_dir():
        raise ProtobenchError(f"Stanford Cars image folder {images_dir} is missing; {_FIX}.")

    def locate(name: str) -> Path:
        return first_existing([base / "devkit" / name, base / name], f"Stanford Cars {name}", _FIX)

    meta_path = locate("cars_meta.mat")
    class_names = strings(load_mat(meta_path, ("class_names",), _FIX)["class_names"], meta_path, "class_names", _FIX)
    if not class_names:
        raise ProtobenchError(f"{meta_path}: 'class_names' is empty; {_FIX}.")

    annos_path = locate(_ANNOS[split])
    annos = load_mat(annos_path, ("annotations",), _FIX)["annotations"]
    fnames = strings(struct_field(annos, "fname", annos_path, "annotations", _FIX), annos_path, "fname", _FIX)
    numbers = integers(struct_field(annos, "class", annos_path, "annotations", _FIX), annos_path, "class", _FIX)
    labels = check_labels(numbers, len(class_names), annos_path, "class", _FIX)

    image_paths = [images_dir / Path(name).name for name in fnames]
    check_images_exist(image_paths, annos_path, _FIX)
    return ImageDataset(
        name="cars",
        root=base,
        split=split,
        class_names=class_names,
        labels=np.asarray(labels, dtype=np.int64),
        image_paths=image_paths,
        annotations=None,
        annotation_files=[meta_path, annos_path],
        image_size=image_size,
    )
