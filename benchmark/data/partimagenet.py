"""Reader of PartImageNet's ``PartImageNet_Seg`` release (He et al., ECCV 2022;
github.com/TACJu/PartImageNet), whose parts are segmentation polygons.

Layout under ``root`` (or ``root/PartImageNet``, where the archive extracts)::

    images/<split>/<file_name>            split: train, val, test
    annotations/<split>/<split>.json      COCO format:
        images       id, file_name (``n01440764_10029.JPEG``: ImageNet synset, then a number), width, height
        annotations  image_id, category_id, segmentation (polygons ``[x1, y1, x2, y2, …]``), area, iscrowd
        categories   id, name (a super-category's part, e.g. ``Bird Head``)

The release offers two splits: ``PartImageNet_OOD``, whose train, val and test sets hold different
classes (109, 19 and 30: 16,540, 2,957 and 4,598 images), and ``PartImageNet_Seg``, whose sets
share the 158 classes. Classification needs shared classes, so the suite reads ``PartImageNet_Seg``:
its train split is the release's train set, its test split the release's test set; the release's
val set is not read (a tuning study carves its validation split from train, as on every dataset).
The release's README does not publish the Seg split's sizes.

Classes are the ImageNet synsets (wnids) of the training set's file names, sorted; a test image of
another synset is refused. Parts are the categories in the order of their ids (40 in the release:
e.g. Bird Head, Body, Wing, Foot, Tail); an image's part vector covers all of them, those of other
super-categories never visible. As PDiscoFormer's loader does (``data_sets/part_imagenet.py``), an
annotation with area 0 or iscrowd 1 is skipped and a polygon of two points stands for its
annotation's bbox. Every polygon vertex must lie in its image (``0 ≤ x ≤ width``, ``0 ≤ y ≤ height``).
Images are used whole (no crop), resized to 224 × 224; polygons are scaled with them and rasterised
at the pixel centres, and a part lies under a prototype's peak when the peak's region holds a pixel
of its mask (``metrics/part_masks.py``, docs/protocol/metrics.md "Parts given as masks"). The
object's mask for comprehensiveness and localisation is the union of its parts.

Everything is validated (files present, every entry parsed, annotations naming listed images and
categories, polygons inside their images, image files present) before any image is decoded; errors
name the file, the line and the entry.
"""
from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from benchmark.data.coco_json import CocoFile
from benchmark.data.dataset import ImageDataset, PartPolygons, check_images_exist, check_split
from benchmark.errors import ProtobenchError
from metrics.part_masks import MAX_PARTS_PER_IMAGE

RELEASE_SPLITS = ("train", "val", "test")
_WNID = re.compile(r"n\d{8}")  # an ImageNet synset id
_FIX = ("re-download and extract PartImageNet_Seg from github.com/TACJu/PartImageNet, or regenerate it with "
        "`protobench make-data partimagenet`")


def find_partimagenet_dir(root: Path) -> Path:
    """The folder holding ``images/`` and ``annotations/``: ``root`` itself or ``root/PartImageNet``."""
    for candidate in (root, root / "PartImageNet"):
        if (candidate / "annotations").is_dir() and (candidate / "images").is_dir():
            return candidate
    raise ProtobenchError(f"No images/ and annotations/ folders in {root} or {root / 'PartImageNet'}; point the "
                          f"partimagenet dataset root at the extracted PartImageNet_Seg folder, or {_FIX}.")


def annotation_path(base: Path, release_split: str) -> Path:
    return base / "annotations" / release_split / f"{release_split}.json"


def _open(base: Path, release_split: str) -> CocoFile:
    path = annotation_path(base, release_split)
    if not path.is_file():
        raise ProtobenchError(f"PartImageNet annotation file {path} is missing; {_FIX}.")
    return CocoFile(path, _FIX)


def _image_entries(coco: CocoFile) -> list[tuple[int, str, str, int, int]]:
    """``(id, file_name, wnid, width, height)`` of every entry of ``images``, ids unique."""
    out, seen = [], {}
    for k, entry in enumerate(coco.array("images")):
        image_id = coco.field("images", k, entry, "id", "int")
        name = coco.field("images", k, entry, "file_name", "str")
        width = coco.field("images", k, entry, "width", "int")
        height = coco.field("images", k, entry, "height", "int")
        if image_id in seen:
            raise coco.error("images", k, f"image id {image_id} already appeared at images[{seen[image_id]}]")
        seen[image_id] = k
        rel = PurePosixPath(name)
        if not name or rel.is_absolute() or ".." in rel.parts:
            raise coco.error("images", k, f"file_name {name!r} must be a path inside the split's image folder")
        wnid = rel.name.split("_", 1)[0]
        if not _WNID.fullmatch(wnid):
            raise coco.error("images", k, f"file_name {name!r} does not start with an ImageNet synset "
                                          "(n + 8 digits, then '_')")
        if width < 1 or height < 1:
            raise coco.error("images", k, f"the size needs width, height >= 1, got {width} × {height}")
        out.append((image_id, name, wnid, width, height))
    if not out:
        raise ProtobenchError(f"{coco.path} lists no images; {_FIX}.")
    return out


def _categories(coco: CocoFile) -> tuple[list[str], dict[int, int]]:
    """Part names in the order of the category ids, and category id → part index."""
    names: dict[int, str] = {}
    for k, entry in enumerate(coco.array("categories")):
        category = coco.field("categories", k, entry, "id", "int")
        if category in names:
            raise coco.error("categories", k, f"category id {category} is listed twice")
        names[category] = coco.field("categories", k, entry, "name", "str")
    if not names:
        raise ProtobenchError(f"{coco.path} lists no categories (parts); {_FIX}.")
    order = sorted(names)
    return [names[c] for c in order], {c: k for k, c in enumerate(order)}


def _polygons(coco: CocoFile, k: int, entry: dict[str, Any], width: int, height: int) -> list[np.ndarray]:
    """The polygons of annotation ``k`` as (V, 2) vertices, each inside its ``width × height`` image."""
    segmentation = entry.get("segmentation")
    if not isinstance(segmentation, list) or not segmentation:
        raise coco.error("annotations", k, "'segmentation' must be a non-empty list of polygons "
                                           "(run-length encodings are not read)")
    out = []
    for n, polygon in enumerate(segmentation):
        if (not isinstance(polygon, list) or len(polygon) % 2 or len(polygon) < 4
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in polygon)):
            raise coco.error("annotations", k, f"polygon {n} must be a list of 2 or more x, y number pairs")
        xy = np.array(polygon, dtype=np.float64).reshape(-1, 2)
        if len(xy) == 2:  # PDiscoFormer part_imagenet.py: a two-point polygon stands for the bbox
            bbox = entry.get("bbox")
            if (not isinstance(bbox, list) or len(bbox) != 4
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)):
                raise coco.error("annotations", k, f"polygon {n} has two points, so its 'bbox' [x, y, w, h] is read, "
                                                   f"but it is {bbox!r}")
            x, y, w, h = (float(v) for v in bbox)
            xy = np.array([[x, y], [x, y + h], [x + w, y + h], [x + w, y]])
        outside = ~(np.isfinite(xy).all(axis=1) & (xy[:, 0] >= 0) & (xy[:, 0] <= width)
                    & (xy[:, 1] >= 0) & (xy[:, 1] <= height))
        if outside.any():
            x, y = xy[int(np.flatnonzero(outside)[0])]
            raise coco.error("annotations", k, f"polygon {n} has the vertex ({x:g}, {y:g}) outside its "
                                               f"{width} × {height} image")
        out.append(xy)
    return out


def _class_names(base: Path, split: str, coco: CocoFile) -> list[str]:
    """The sorted synsets of the training set (read from its file unless ``coco`` is it)."""
    train = coco if split == "train" else _open(base, "train")
    return sorted({wnid for _, _, wnid, _, _ in _image_entries(train)})


def read_partimagenet(root: str | Path, split: str, *, image_size: int = 224) -> ImageDataset:
    """Read the ``"train"`` or ``"test"`` split of PartImageNet_Seg (the release's train and test sets)."""
    check_split("partimagenet", split)
    base = find_partimagenet_dir(Path(root))
    coco = _open(base, split)
    images_dir = base / "images" / split
    if not images_dir.is_dir():
        raise ProtobenchError(f"PartImageNet image folder {images_dir} is missing; {_FIX}.")
    entries = _image_entries(coco)
    class_names = _class_names(base, split, coco)
    label_of = {wnid: k for k, wnid in enumerate(class_names)}
    for k, (_, name, wnid, _, _) in enumerate(entries):
        if wnid not in label_of:
            raise coco.error("images", k, f"synset {wnid} of {name!r} has no image in the training set "
                                          f"({annotation_path(base, 'train')})")
    part_names, part_of = _categories(coco)

    row_of = {image_id: row for row, (image_id, *_) in enumerate(entries)}
    polygons: list[list[tuple[int, np.ndarray]]] = [[] for _ in entries]
    for k, entry in enumerate(coco.array("annotations")):
        image_id = coco.field("annotations", k, entry, "image_id", "int")
        category = coco.field("annotations", k, entry, "category_id", "int")
        area = coco.field("annotations", k, entry, "area", "number")
        crowd = coco.field("annotations", k, entry, "iscrowd", "int")
        if image_id not in row_of:
            raise coco.error("annotations", k, f"image_id {image_id} is not listed in 'images'")
        if category not in part_of:
            raise coco.error("annotations", k, f"category_id {category} is not listed in 'categories'")
        if area == 0 or crowd == 1:  # PDiscoFormer part_imagenet.py skips these
            continue
        row = row_of[image_id]
        _, _, _, width, height = entries[row]
        polygons[row] += [(part_of[category], xy) for xy in _polygons(coco, k, entry, width, height)]
        if len({part for part, _ in polygons[row]}) > MAX_PARTS_PER_IMAGE:
            raise coco.error("annotations", k, f"image {image_id} has more than {MAX_PARTS_PER_IMAGE} distinct "
                                               "parts, more than the part masks hold (metrics/part_masks.py)")

    image_paths = [images_dir / name for _, name, _, _, _ in entries]
    check_images_exist(image_paths, coco.path, _FIX)
    files = [coco.path] if split == "train" else [coco.path, annotation_path(base, "train")]
    return ImageDataset(
        name="partimagenet",
        root=base,
        split=split,
        class_names=class_names,
        labels=np.array([label_of[wnid] for _, _, wnid, _, _ in entries], dtype=np.int64),
        image_paths=image_paths,
        annotations=None,
        annotation_files=files,
        image_size=image_size,
        part_polygons=PartPolygons(part_names=part_names, polygons=polygons),
        image_sizes=np.array([(w, h) for _, _, _, w, h in entries], dtype=np.int64).reshape(-1, 2),
    )
