"""Reader of the official CUB-200-2011 layout (also used for ``synthbirds``).

Layout under ``root`` (or ``root/CUB_200_2011``), as distributed by Caltech::

    images.txt               <image_id> <class_dir>/<file>.jpg
    image_class_labels.txt   <image_id> <class_id>            (1-based)
    train_test_split.txt     <image_id> <is_training_image>   (1 = train, 0 = test)
    bounding_boxes.txt       <image_id> <x> <y> <width> <height>   (floats)
    classes.txt              <class_id> <class_name>
    parts/parts.txt          <part_id> <part name, may contain spaces>
    parts/part_locs.txt      <image_id> <part_id> <x> <y> <visible>
    images/<class_dir>/<file>.jpg
    segmentations/<class_dir>/<file>.png   optional; also looked up next to the CUB folder,
                                           where the separately distributed masks extract

Everything is validated (files present, every line parsed, ids consistent, image files
present) before any image is decoded; errors name the file and line.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmark.data.dataset import ImageDataset, PartAnnotations, check_images_exist, check_split
from benchmark.data.keypoints import keypoint_arrays
from benchmark.data.tables import (TableFile, check_contiguous, check_same_ids, read_boxes, read_split_flags,
                                   rows_by_id)
from benchmark.data.transforms import integer_box
from benchmark.errors import ProtobenchError

ANNOTATION_FILES: tuple[str, ...] = (
    "images.txt",
    "image_class_labels.txt",
    "train_test_split.txt",
    "bounding_boxes.txt",
    "classes.txt",
    "parts/parts.txt",
    "parts/part_locs.txt",
)

_FIX = {
    "cub": "re-download and extract CUB_200_2011",
    "synthbirds": "regenerate the dataset with generate_synthbirds",
}


def find_cub_dir(root: Path, name: str) -> Path:
    """The folder holding ``images.txt``: ``root`` itself or ``root/CUB_200_2011``."""
    for candidate in (root, root / "CUB_200_2011"):
        if (candidate / "images.txt").is_file():
            return candidate
    raise ProtobenchError(
        f"No images.txt found in {root} or {root / 'CUB_200_2011'}; point the {name} dataset root at the "
        f"folder holding the CUB layout (images.txt, images/, parts/) or {_FIX.get(name, _FIX['cub'])}."
    )


def _read_part_locs(
    table: TableFile, image_ids: list[int], split_ids: list[int], num_parts: int
) -> tuple[np.ndarray, np.ndarray]:
    """``part_xy`` (N×P×2, ``int(float(·))``, 0 where hidden) and ``part_visible`` (N×P) of the
    split's images; every (image, part) pair of the dataset must appear exactly once."""
    locs = table.matrix(5)
    bad = np.flatnonzero(locs[:, 0] != np.trunc(locs[:, 0]))
    if bad.size:
        raise table.row_error(bad[0], "the image id must be an integer")
    image_id = locs[:, 0].astype(np.int64)
    ids = np.asarray(image_ids, dtype=np.int64)  # sorted
    index = np.searchsorted(ids, image_id).clip(max=len(ids) - 1)
    line_image = np.where(ids[index] == image_id, index, -1)
    return keypoint_arrays(table, line_image, image_id, locs[:, 1:], image_ids,
                           np.searchsorted(ids, split_ids), first_part=1, num_parts=num_parts)


def read_cub(root: str | Path, split: str, *, name: str = "cub", image_size: int = 224) -> ImageDataset:
    """Read one split (``"train"``/``"test"``) of a dataset in the official CUB-200-2011 layout."""
    fix = _FIX.get(name, _FIX["cub"])
    check_split(name, split)
    cub = find_cub_dir(Path(root), name)
    paths = {rel: cub / rel for rel in ANNOTATION_FILES}
    for rel, path in paths.items():
        if not path.is_file():
            raise ProtobenchError(f"CUB annotation file {path} is missing; {fix}.")

    def table(rel: str, expected: str) -> TableFile:
        return TableFile(paths[rel], expected, fix)

    t_images = table("images.txt", "<image_id> <class_dir>/<file>")
    images = rows_by_id(t_images, t_images.rows((int, str), rest=True), "image id")
    if not images:
        raise ProtobenchError(f"{t_images.path} lists no images; {fix}.")

    t_classes = table("classes.txt", "<class_id> <class_name>")
    classes = rows_by_id(t_classes, t_classes.rows((int, str), rest=True), "class id")
    check_contiguous(t_classes, classes, "class")

    t_labels = table("image_class_labels.txt", "<image_id> <class_id>")
    labels = rows_by_id(t_labels, t_labels.rows((int, int)), "image id")
    check_same_ids(t_labels, labels, images)
    for lineno, (class_id,) in labels.values():
        if class_id not in classes:
            raise t_labels.error(lineno, f"class id {class_id} is not listed in classes.txt")

    t_split = table("train_test_split.txt", "<image_id> <1 for train, 0 for test>")
    is_train = read_split_flags(t_split, int, images)

    boxes = read_boxes(table("bounding_boxes.txt", "<image_id> <x> <y> <width> <height>"), int, images)

    t_parts = table("parts/parts.txt", "<part_id> <part_name>")
    parts = rows_by_id(t_parts, t_parts.rows((int, str), rest=True), "part id")
    check_contiguous(t_parts, parts, "part")

    want = 1 if split == "train" else 0
    ids = sorted(key for key, (_, (flag,)) in is_train.items() if flag == want)
    if not ids:
        raise ProtobenchError(f"{t_split.path} marks no image as {split}; {fix}.")

    part_xy, part_visible = _read_part_locs(
        table("parts/part_locs.txt", "<image_id> <part_id> <x> <y> <visible 0/1>"), sorted(images), ids, len(parts)
    )

    relpaths = [images[key][1][0] for key in ids]
    image_paths = [cub / "images" / rel for rel in relpaths]
    check_images_exist(image_paths, t_images.path, fix)
    seg_dirs = [d for d in (cub / "segmentations", cub.parent / "segmentations") if d.is_dir()]
    segmentation_paths: list[Path | None] = []
    for rel in relpaths:
        mask = seg_dirs[0] / Path(rel).with_suffix(".png") if seg_dirs else None
        segmentation_paths.append(mask if mask is not None and mask.is_file() else None)

    annotations = PartAnnotations(
        part_names=[parts[k][1][0] for k in sorted(parts)],
        boxes=np.array([integer_box(*boxes[key][1]) for key in ids], dtype=np.int64).reshape(-1, 4),
        part_xy=part_xy,
        part_visible=part_visible,
        segmentation_paths=segmentation_paths,
    )
    return ImageDataset(
        name=name,
        root=cub,
        split=split,
        class_names=[classes[k][1][0] for k in sorted(classes)],
        labels=np.array([labels[key][1][0] - 1 for key in ids], dtype=np.int64),
        image_paths=image_paths,
        annotations=annotations,
        annotation_files=list(paths.values()),
        image_size=image_size,
    )
