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

import math
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.data.dataset import ImageDataset, PartAnnotations, check_images_exist, check_split
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


def _finite(text: str) -> float:
    """``float`` that refuses nan and infinities (they would pass range checks silently)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


class _TableFile:
    """One whitespace-separated annotation file, read line by line with line-numbered errors."""

    def __init__(self, path: Path, expected: str, fix: str) -> None:
        self.path = path
        self.expected = expected
        self.fix = fix

    def error(self, lineno: int, why: str) -> ProtobenchError:
        return ProtobenchError(f"{self.path}, line {lineno}: {why}; fix that line or {self.fix}.")

    def _lines(self) -> list[tuple[int, str]]:
        """``(line number, line)`` of every non-blank line."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ProtobenchError(f"{self.path} is not UTF-8 text; {self.fix}.") from err
        return [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]

    def rows(self, types: tuple[Callable[[str], Any], ...], *, rest: bool = False) -> Iterator[tuple[int, list[Any]]]:
        """Yield ``(line number, converted fields)`` of every non-blank line.

        ``rest``: the last field takes the remainder of the line (names with spaces).
        """
        n = len(types)
        for lineno, line in self._lines():
            fields = line.split(maxsplit=n - 1) if rest else line.split()
            if len(fields) != n:
                raise self.error(lineno, f"expected '{self.expected}', got {line.strip()!r}")
            try:
                yield lineno, [convert(field) for convert, field in zip(types, fields)]
            except ValueError:
                raise self.error(lineno, f"expected '{self.expected}' with numbers, got {line.strip()!r}") from None

    def matrix(self, columns: int) -> np.ndarray:
        """An all-numeric table as an N×columns float array, parsed in C (part_locs.txt has
        176,820 lines); on any bad line, the line-numbered error of :meth:`rows`."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy warns about an empty file
            try:
                values = np.loadtxt(self.path, dtype=np.float64, ndmin=2, comments=None)
            except ValueError:
                values = None
        if values is not None and values.shape[1] == columns and np.isfinite(values).all():
            return values
        for _ in self.rows((_finite,) * columns):
            pass
        raise ProtobenchError(f"{self.path} holds no '{self.expected}' lines; {self.fix}.")

    def row_error(self, row: int, why: str) -> ProtobenchError:
        """:meth:`error` for the ``row``-th non-blank line (0-based) of the file."""
        return self.error(self._lines()[row][0], why)


def find_cub_dir(root: Path, name: str) -> Path:
    """The folder holding ``images.txt``: ``root`` itself or ``root/CUB_200_2011``."""
    for candidate in (root, root / "CUB_200_2011"):
        if (candidate / "images.txt").is_file():
            return candidate
    raise ProtobenchError(
        f"No images.txt found in {root} or {root / 'CUB_200_2011'}; point the {name} dataset root at the "
        f"folder holding the CUB layout (images.txt, images/, parts/) or {_FIX.get(name, _FIX['cub'])}."
    )


def _by_id(table: _TableFile, rows: Iterator[tuple[int, list[Any]]], what: str) -> dict[int, tuple[int, list[Any]]]:
    """Map the first field (an id) of each row to ``(line number, remaining fields)``; ids must be unique."""
    out: dict[int, tuple[int, list[Any]]] = {}
    for lineno, (key, *values) in rows:
        if key in out:
            raise table.error(lineno, f"{what} {key} already appeared on line {out[key][0]}")
        out[key] = (lineno, values)
    return out


def _check_contiguous(table: _TableFile, ids: dict[int, tuple[int, list[Any]]], what: str) -> None:
    """Class and part ids must be exactly 1..K (they index arrays)."""
    if not ids:
        raise ProtobenchError(f"{table.path} lists no {what}s; {table.fix}.")
    for expected, key in enumerate(sorted(ids), start=1):
        if key != expected:
            raise table.error(ids[key][0], f"{what} ids must be 1..{len(ids)} without gaps, found {key}")


def _check_same_ids(table: _TableFile, ids: dict[int, Any], images: dict[int, Any]) -> None:
    """Every image id of images.txt appears in ``table`` and nothing else does."""
    for key in ids:
        if key not in images:
            raise table.error(ids[key][0], f"image id {key} is not listed in images.txt")
    missing = [key for key in images if key not in ids]
    if missing:
        raise ProtobenchError(
            f"{table.path} has no line for image id {missing[0]} ({len(missing)} ids missing in all); "
            f"{table.fix}."
        )


def _read_part_locs(
    table: _TableFile, image_ids: list[int], split_ids: list[int], num_parts: int
) -> tuple[np.ndarray, np.ndarray]:
    """``part_xy`` (N×P×2, ``int(float(·))``, 0 where hidden) and ``part_visible`` (N×P) of the
    split's images; every (image, part) pair of the dataset must appear exactly once."""
    locs = table.matrix(5)
    ints = locs[:, [0, 1, 4]]
    bad = np.flatnonzero((ints != np.trunc(ints)).any(axis=1))
    if bad.size:
        raise table.row_error(bad[0], "image id, part id and visibility must be integers")
    image_id, part_id, visible = (ints[:, c].astype(np.int64) for c in range(3))
    bad = np.flatnonzero(~np.isin(image_id, image_ids))
    if bad.size:
        raise table.row_error(bad[0], f"image id {image_id[bad[0]]} is not listed in images.txt")
    bad = np.flatnonzero((part_id < 1) | (part_id > num_parts))
    if bad.size:
        raise table.row_error(bad[0], f"part id {part_id[bad[0]]} is not listed in parts/parts.txt")
    bad = np.flatnonzero((visible != 0) & (visible != 1))
    if bad.size:
        raise table.row_error(bad[0], f"the visibility flag must be 0 or 1, got {visible[bad[0]]}")

    index = np.searchsorted(image_ids, image_id)  # image_ids is sorted and holds every image_id
    pair = index * num_parts + part_id - 1
    order = np.argsort(pair, kind="stable")
    repeated = order[1:][pair[order][1:] == pair[order][:-1]]
    if repeated.size:
        row = repeated.min()
        raise table.row_error(row, f"image {image_id[row]} part {part_id[row]} already has a location")
    seen = np.zeros(len(image_ids) * num_parts, dtype=bool)
    seen[pair] = True
    if not seen.all():
        k, p = divmod(int(np.flatnonzero(~seen)[0]), num_parts)
        raise ProtobenchError(
            f"{table.path} has no line for image {image_ids[k]} part {p + 1} "
            f"({int((~seen).sum())} (image, part) pairs missing in all); {table.fix}."
        )

    row_of = np.full(len(image_ids), -1, dtype=np.int64)
    row_of[np.searchsorted(image_ids, split_ids)] = np.arange(len(split_ids))
    row = row_of[index]
    keep = (row >= 0) & (visible == 1)
    part_xy = np.zeros((len(split_ids), num_parts, 2), dtype=np.int64)
    part_xy[row[keep], part_id[keep] - 1] = locs[keep][:, 2:4].astype(np.int64)  # truncation toward zero
    part_visible = np.zeros((len(split_ids), num_parts), dtype=bool)
    part_visible[row[keep], part_id[keep] - 1] = True
    return part_xy, part_visible


def read_cub(root: str | Path, split: str, *, name: str = "cub", image_size: int = 224) -> ImageDataset:
    """Read one split (``"train"``/``"test"``) of a dataset in the official CUB-200-2011 layout."""
    fix = _FIX.get(name, _FIX["cub"])
    check_split(name, split)
    cub = find_cub_dir(Path(root), name)
    paths = {rel: cub / rel for rel in ANNOTATION_FILES}
    for rel, path in paths.items():
        if not path.is_file():
            raise ProtobenchError(f"CUB annotation file {path} is missing; {fix}.")

    def table(rel: str, expected: str) -> _TableFile:
        return _TableFile(paths[rel], expected, fix)

    t_images = table("images.txt", "<image_id> <class_dir>/<file>")
    images = _by_id(t_images, t_images.rows((int, str), rest=True), "image id")
    if not images:
        raise ProtobenchError(f"{t_images.path} lists no images; {fix}.")

    t_classes = table("classes.txt", "<class_id> <class_name>")
    classes = _by_id(t_classes, t_classes.rows((int, str), rest=True), "class id")
    _check_contiguous(t_classes, classes, "class")

    t_labels = table("image_class_labels.txt", "<image_id> <class_id>")
    labels = _by_id(t_labels, t_labels.rows((int, int)), "image id")
    _check_same_ids(t_labels, labels, images)
    for lineno, (class_id,) in labels.values():
        if class_id not in classes:
            raise t_labels.error(lineno, f"class id {class_id} is not listed in classes.txt")

    t_split = table("train_test_split.txt", "<image_id> <1 for train, 0 for test>")
    is_train = _by_id(t_split, t_split.rows((int, int)), "image id")
    _check_same_ids(t_split, is_train, images)
    for lineno, (flag,) in is_train.values():
        if flag not in (0, 1):
            raise t_split.error(lineno, f"the split flag must be 1 (train) or 0 (test), got {flag}")

    t_boxes = table("bounding_boxes.txt", "<image_id> <x> <y> <width> <height>")
    boxes = _by_id(t_boxes, t_boxes.rows((int, _finite, _finite, _finite, _finite)), "image id")
    _check_same_ids(t_boxes, boxes, images)
    for lineno, (x, y, w, h) in boxes.values():
        if x < 0 or y < 0 or w < 1 or h < 1:
            raise t_boxes.error(lineno, f"the box needs x, y >= 0 and width, height >= 1, got {x} {y} {w} {h}")

    t_parts = table("parts/parts.txt", "<part_id> <part_name>")
    parts = _by_id(t_parts, t_parts.rows((int, str), rest=True), "part id")
    _check_contiguous(t_parts, parts, "part")

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
