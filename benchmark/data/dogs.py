"""Reader of the official Stanford Dogs layout (full images, accuracy only; docs/protocol/harness.md).

Layout under ``root`` (the three official tarballs extracted side by side)::

    Images/<wnid>-<breed>/<file>.jpg
    Annotation/<wnid>-<breed>/<file>           (boxes; unused: the protocol uses full images)
    lists/train_list.mat, lists/test_list.mat  (``lists.tar``; also accepted directly in root)
        file_list        N×1 cell, paths relative to Images/
        annotation_list  N×1 cell, paths relative to Annotation/
        labels           N×1, 1-based class numbers

Class ``k`` (0-based) is the k-th directory of ``Images/`` in sorted order, which is the
order of the official labels; every listed file must lie in its label's directory.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmark.data.dataset import ImageDataset, check_images_exist, check_split
from benchmark.data.matfiles import check_labels, first_existing, integers, load_mat, strings
from benchmark.errors import ProtobenchError

_FIX = "re-download and extract the Stanford Dogs images.tar and lists.tar into the dataset root"


def read_dogs(root: str | Path, split: str, *, image_size: int = 224) -> ImageDataset:
    """Read the ``"train"`` or ``"test"`` split of Stanford Dogs."""
    check_split("dogs", split)
    root = Path(root)
    images_dir = root / "Images"
    if not images_dir.is_dir():
        raise ProtobenchError(f"Stanford Dogs image folder {images_dir} is missing; {_FIX}.")
    list_name = f"{split}_list.mat"
    list_path = first_existing([root / "lists" / list_name, root / list_name], f"Stanford Dogs {list_name}", _FIX)
    mat = load_mat(list_path, ("file_list", "labels"), _FIX)
    files = strings(mat["file_list"], list_path, "file_list", _FIX)
    numbers = integers(mat["labels"], list_path, "labels", _FIX)
    if len(files) != len(numbers):
        raise ProtobenchError(
            f"{list_path}: 'file_list' has {len(files)} entries but 'labels' has {len(numbers)}; {_FIX}."
        )
    class_names = sorted(d.name for d in images_dir.iterdir() if d.is_dir())
    if not class_names:
        raise ProtobenchError(f"Stanford Dogs image folder {images_dir} has no class folders; {_FIX}.")
    labels = check_labels(numbers, len(class_names), list_path, "labels", _FIX)
    for rel, label in zip(files, labels):
        folder = Path(rel).parent.name
        if folder != class_names[label]:
            raise ProtobenchError(
                f"{list_path}: {rel} is labelled class {label + 1} but class {label + 1} is folder "
                f"{class_names[label]} (sorted folders of {images_dir}); {_FIX}."
            )
    image_paths = [images_dir / rel for rel in files]
    check_images_exist(image_paths, list_path, _FIX)
    return ImageDataset(
        name="dogs",
        root=root,
        split=split,
        class_names=class_names,
        labels=np.asarray(labels, dtype=np.int64),
        image_paths=image_paths,
        annotations=None,
        annotation_files=[list_path],
        image_size=image_size,
    )
