"""Reader of the official NABirds layout (Van Horn et al., CVPR 2015; dl.allaboutbirds.org/nabirds),
which keeps CUB-200-2011's keypoint form, so consistency and stability apply unchanged.

Layout under ``root`` (or ``root/nabirds``, where the archive extracts), as the dataset's README and
its sample loader ``nabirds.py`` read it::

    images.txt               <image_id> <class_dir>/<file>.jpg     (image ids are UUIDs)
    image_class_labels.txt   <image_id> <class_id>
    train_test_split.txt     <image_id> <is_training_image>        (1 = train, 0 = test)
    bounding_boxes.txt       <image_id> <x> <y> <width> <height>   (pixels)
    sizes.txt                <image_id> <width> <height>
    classes.txt              <class_id> <class name>               every node of the hierarchy
    hierarchy.txt            <child_class_id> <parent_class_id>
    parts/parts.txt          <part_id> <part name>                 11 parts, ids from 0
    parts/part_locs.txt      <image_id> <part_id> <x> <y> <visible>
    images/<class_dir>/<file>.jpg

Classes are the leaves of ``hierarchy.txt`` that label images (the official 555 visual categories:
species, and sexes or plumages of some species), in the order of their class ids; the coarser
nodes are read and checked (each names a listed parent, no cycle) but not classified. The
official split: 23,929 train and 24,633 test images. Images keep the order of ``images.txt``.
Images are cropped to their box as CUB's are (``x2 = x + w``, ``y2 = y + h``); a box must start
inside its image's ``sizes.txt`` size, and the decoded image must have that size
(``check_images``). Keypoints map into the crop as CUB's do (docs/protocol/harness.md); NABirds has
no segmentation masks, so comprehensiveness and localisation are not computed.

Everything is validated (files present, every line parsed, the same image ids in every file,
part ids from ``parts.txt``, image files present) before any image is decoded; errors name the
file and line.
"""
from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.data.dataset import (ImageDataset, PartAnnotations, check_images_exist, check_split,
                                    part_outside_image)
from benchmark.data.keypoints import keypoint_arrays
from benchmark.data.tables import (TableFile, check_contiguous, check_same_ids, finite, read_boxes, read_split_flags,
                                   rows_by_id)
from benchmark.data.transforms import integer_box
from benchmark.errors import ProtobenchError

ANNOTATION_FILES: tuple[str, ...] = (
    "images.txt",
    "image_class_labels.txt",
    "train_test_split.txt",
    "bounding_boxes.txt",
    "sizes.txt",
    "classes.txt",
    "hierarchy.txt",
    "parts/parts.txt",
    "parts/part_locs.txt",
)
_FIX = "re-download and extract NABirds (nabirds.tar.gz), or regenerate it with `protobench make-data nabirds`"


def find_nabirds_dir(root: Path) -> Path:
    """The folder holding ``images.txt``: ``root`` itself or ``root/nabirds``."""
    for candidate in (root, root / "nabirds"):
        if (candidate / "images.txt").is_file():
            return candidate
    raise ProtobenchError(f"No images.txt found in {root} or {root / 'nabirds'}; point the nabirds dataset root "
                          f"at the folder holding images.txt, images/ and parts/, or {_FIX}.")


def _leaf_classes(t_classes: TableFile, classes: dict[Hashable, tuple[int, list[Any]]], t_tree: TableFile,
                  parents: dict[Hashable, tuple[int, list[Any]]]) -> set[Hashable]:
    """The class ids with no child in ``hierarchy.txt``, after checking every node names a listed
    parent and every chain of parents ends at a root."""
    for child, (lineno, (parent,)) in parents.items():
        for node, what in ((child, "class"), (parent, "parent class")):
            if node not in classes:
                raise t_tree.error(lineno, f"{what} {node} is not listed in classes.txt")
    for start in parents:
        seen = {start}
        node = start
        while node in parents:
            node = parents[node][1][0]
            if node in seen:
                raise t_tree.error(parents[start][0], f"the parents of class {start} form a cycle through class {node}")
            seen.add(node)
    has_child = {parent for _, (parent,) in parents.values()}
    return {key for key in classes if key not in has_child}


def _read_part_locs(table: TableFile, image_ids: list[str], split_images: np.ndarray,
                    num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Keypoint arrays of the split (:func:`benchmark.data.keypoints.keypoint_arrays`); the 534,182
    lines of the official file are split in Python and converted by numpy, and a line that does not
    parse is named by :meth:`TableFile.rows`."""
    lines = [line.split() for line in table.path.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        if any(len(fields) != 5 for fields in lines):
            raise ValueError
        values = np.array([fields[1:] for fields in lines], dtype=np.float64).reshape(-1, 4)
        if not np.isfinite(values).all():
            raise ValueError
    except ValueError:
        for _ in table.rows((str, finite, finite, finite, finite)):  # names the first bad line
            pass
        raise ProtobenchError(f"{table.path} does not parse as '{table.expected}' lines; {table.fix}.") from None
    index = {image_id: k for k, image_id in enumerate(image_ids)}
    line_ids = [fields[0] for fields in lines]
    line_image = np.array([index.get(image_id, -1) for image_id in line_ids], dtype=np.int64)
    return keypoint_arrays(table, line_image, line_ids, values, image_ids, split_images,
                           first_part=0, num_parts=num_parts)


def read_nabirds(root: str | Path, split: str, *, image_size: int = 224) -> ImageDataset:
    """Read the ``"train"`` or ``"test"`` split of NABirds in its official layout."""
    check_split("nabirds", split)
    base = find_nabirds_dir(Path(root))
    paths = {rel: base / rel for rel in ANNOTATION_FILES}
    for path in paths.values():
        if not path.is_file():
            raise ProtobenchError(f"NABirds annotation file {path} is missing; {_FIX}.")

    def table(rel: str, expected: str) -> TableFile:
        return TableFile(paths[rel], expected, _FIX)

    t_images = table("images.txt", "<image_id> <class_dir>/<file>")
    images = rows_by_id(t_images, t_images.rows((str, str), rest=True), "image id")
    if not images:
        raise ProtobenchError(f"{t_images.path} lists no images; {_FIX}.")

    t_classes = table("classes.txt", "<class_id> <class name>")
    classes = rows_by_id(t_classes, t_classes.rows((int, str), rest=True), "class id")
    t_tree = table("hierarchy.txt", "<child_class_id> <parent_class_id>")
    parents = rows_by_id(t_tree, t_tree.rows((int, int)), "class id")
    leaves = _leaf_classes(t_classes, classes, t_tree, parents)

    t_labels = table("image_class_labels.txt", "<image_id> <class_id>")
    labels = rows_by_id(t_labels, t_labels.rows((str, int)), "image id")
    check_same_ids(t_labels, labels, images)
    for lineno, (class_id,) in labels.values():
        if class_id not in classes:
            raise t_labels.error(lineno, f"class id {class_id} is not listed in classes.txt")
        if class_id not in leaves:
            raise t_labels.error(lineno, f"class {class_id} has child classes in hierarchy.txt; the suite "
                                         "classifies the leaves of the hierarchy")

    t_split = table("train_test_split.txt", "<image_id> <1 for train, 0 for test>")
    is_train = read_split_flags(t_split, str, images)

    t_sizes = table("sizes.txt", "<image_id> <width> <height>")
    sizes = rows_by_id(t_sizes, t_sizes.rows((str, int, int)), "image id")
    check_same_ids(t_sizes, sizes, images)
    for lineno, (width, height) in sizes.values():
        if width < 1 or height < 1:
            raise t_sizes.error(lineno, f"the size needs width, height >= 1, got {width} {height}")

    t_boxes = table("bounding_boxes.txt", "<image_id> <x> <y> <width> <height>")
    boxes = read_boxes(t_boxes, str, images)
    for key, (lineno, (x, y, w, h)) in boxes.items():
        width, height = sizes[key][1]
        if int(x) >= width or int(y) >= height:
            raise t_boxes.error(lineno, f"the box ({x} {y} {w} {h}) starts outside its {width}×{height} image "
                                        f"(sizes.txt, line {sizes[key][0]})")

    t_parts = table("parts/parts.txt", "<part_id> <part name>")
    parts = rows_by_id(t_parts, t_parts.rows((int, str), rest=True), "part id")
    check_contiguous(t_parts, parts, "part", first=0)

    order = list(images)  # the order of images.txt
    want = 1 if split == "train" else 0
    chosen = np.array([k for k, key in enumerate(order) if is_train[key][1][0] == want], dtype=np.int64)
    if not chosen.size:
        raise ProtobenchError(f"{t_split.path} marks no image as {split}; {_FIX}.")
    part_xy, part_visible = _read_part_locs(
        table("parts/part_locs.txt", "<image_id> <part_id> <x> <y> <visible 0/1>"), order, chosen, len(parts))

    ids = [order[k] for k in chosen]
    for row, key in enumerate(ids):  # where sizes.txt gives the image's size, as a box is checked against it
        width, height = sizes[key][1]
        part = part_outside_image(part_xy[row], part_visible[row], width, height)
        if part is not None:
            x, y = (int(v) for v in part_xy[row, part])
            raise ProtobenchError(f"{paths['parts/part_locs.txt']}: image {key} part {part} lies at ({x}, {y}), "
                                  f"outside its {width}×{height} image (sizes.txt, line {sizes[key][0]}); {_FIX}.")
    image_paths = [base / "images" / images[key][1][0] for key in ids]
    check_images_exist(image_paths, t_images.path, _FIX)
    class_ids = sorted({labels[key][1][0] for key in images})  # the leaves that label images
    label_of = {class_id: k for k, class_id in enumerate(class_ids)}
    annotations = PartAnnotations(
        part_names=[parts[k][1][0] for k in sorted(parts)],
        boxes=np.array([integer_box(*boxes[key][1]) for key in ids], dtype=np.int64).reshape(-1, 4),
        part_xy=part_xy,
        part_visible=part_visible,
        segmentation_paths=[None] * len(ids),
    )
    return ImageDataset(
        name="nabirds",
        root=base,
        split=split,
        class_names=[classes[k][1][0] for k in class_ids],
        labels=np.array([label_of[labels[key][1][0]] for key in ids], dtype=np.int64),
        image_paths=image_paths,
        annotations=annotations,
        annotation_files=list(paths.values()),
        image_size=image_size,
        image_sizes=np.array([sizes[key][1] for key in ids], dtype=np.int64).reshape(-1, 2),
    )
