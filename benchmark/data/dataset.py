"""The dataset object every reader returns: images, labels and their parts: keypoints with the
box to crop to (CUB-200-2011, NABirds) or segmentation polygons (PartImageNet)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from PIL import Image

from benchmark.data.fingerprint import split_fingerprint
from benchmark.data.transforms import crop_to_box, model_transform, open_rgb
from benchmark.errors import ProtobenchError

SPLITS: tuple[str, ...] = ("train", "test")


def check_split(name: str, split: str) -> None:
    """Every dataset has exactly the official ``train`` and ``test`` splits."""
    if split not in SPLITS:
        raise ProtobenchError(f"Unknown split {split!r} for dataset {name}; use 'train' or 'test'.")


def check_images_exist(image_paths: list[Path], listed_in: Path, fix: str) -> None:
    """One error naming the first listed image that is not on disk (and how many are missing)."""
    missing = [p for p in image_paths if not p.is_file()]
    if missing:
        raise ProtobenchError(
            f"Image file {missing[0]} listed in {listed_in} is missing ({len(missing)} missing in all); {fix}."
        )


JPEG_END_OF_IMAGE = b"\xff\xd9"  # the EOI marker (ITU-T T.81, Table B.1)


def _ends_with(file: BinaryIO, marker: bytes) -> bool:
    file.seek(-len(marker), os.SEEK_END)
    return file.read(len(marker)) == marker


def box_outside_image(box: np.ndarray, width: int, height: int, path: Path) -> str | None:
    """What is wrong with a box ``(x1, y1, x2, y2)`` that starts outside its image, else None."""
    x1, y1, x2, y2 = (int(v) for v in box)
    if x1 < width and y1 < height:
        return None
    return (f"the box ({x1}, {y1}, {x2}, {y2}) of {path} starts outside the {width}×{height} image; "
            "fix its line in bounding_boxes.txt")


def part_outside_image(xy: np.ndarray, visible: np.ndarray, width: int, height: int) -> int | None:
    """The first visible part (index) whose location ``(x, y)`` lies outside a ``width`` × ``height``
    image (0 ≤ x ≤ width, 0 ≤ y ≤ height: a point on the far border is on the image), else None."""
    outside = visible & ((xy[:, 0] < 0) | (xy[:, 0] > width) | (xy[:, 1] < 0) | (xy[:, 1] > height))
    found = np.flatnonzero(outside)
    return int(found[0]) if found.size else None


#: how much of each image :func:`check_images` decodes: ``run`` (what ``run`` checks before compute),
#: ``header`` (``doctor``: the header of every image, a JPEG decoded only without its end marker),
#: ``deep`` (``doctor --deep``: every image decoded)
DEPTHS = ("run", "header", "deep")


def check_images(dataset: ImageDataset, depth: str = "run") -> None:
    """Check that every image of the split decodes and its annotations fit it, before any compute.

    Each file's header is decoded (format and size; PIL refuses an image of more than twice
    ``Image.MAX_IMAGE_PIXELS`` pixels, a decompression bomb, here). A JPEG that ends with its
    end-of-image marker (FF D9) is complete; one that does not (truncated, or bytes after the
    marker) is decoded, at 1/8 scale where the format allows (PIL ``draft``), which reads the whole
    compressed stream, so a corrupt or truncated file fails here; ``run`` decodes every other
    format the same way, ``doctor`` (``header``) only with ``--deep`` (which decodes every image,
    complete JPEGs too). A CUB-format box must start inside its image (x1 < width, y1 < height);
    its far edge may reach past the border, where the crop is clipped as the official
    ``img[y1:y2, x1:x2]`` slice is (:func:`crop_to_box`); a visible part must lie on the image
    (:func:`part_outside_image`). Where the annotations give each image's size (NABirds'
    ``sizes.txt``, PartImageNet's JSON), the decoded size must be that size: the parts were drawn
    on it. One error names the first bad image and how many are bad."""
    if depth not in DEPTHS:
        raise ValueError(f"depth {depth!r} is not one of {DEPTHS}")
    bad: list[str] = []
    annotations = dataset.annotations
    boxes = None if annotations is None else annotations.boxes
    sizes = dataset.image_sizes
    for i, path in enumerate(dataset.image_paths):
        try:
            with Image.open(path) as image:
                width, height = image.size
                complete = image.format == "JPEG" and _ends_with(image.fp, JPEG_END_OF_IMAGE)
                if depth == "deep" or not (complete or (depth == "header" and image.format != "JPEG")):
                    image.draft("RGB", (max(width // 8, 1), max(height // 8, 1)))
                    image.load()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
            bad.append(f"{path} cannot be decoded ({err}); re-download or regenerate the dataset")
            continue
        if sizes is not None and (width, height) != (int(sizes[i, 0]), int(sizes[i, 1])):
            bad.append(f"{path} is {width}×{height} but its annotations give {int(sizes[i, 0])}×{int(sizes[i, 1])}; "
                       "re-download the image or fix its size in the annotation file")
            continue
        problem = None if boxes is None else box_outside_image(boxes[i], width, height, path)
        if problem:
            bad.append(problem)
            continue
        part = None if annotations is None else part_outside_image(annotations.part_xy[i], annotations.part_visible[i],
                                                                   width, height)
        if part is not None:
            x, y = (int(v) for v in annotations.part_xy[i, part])  # type: ignore[union-attr]
            bad.append(f"part {annotations.part_names[part]!r} of {path} lies at ({x}, {y}), outside the "  # type: ignore[union-attr]
                       f"{width}×{height} image; fix its line in parts/part_locs.txt")
    if bad:
        raise ProtobenchError(f"{len(bad)} of {len(dataset)} images of {dataset.name} {dataset.split} are unusable; "
                              f"the first: {bad[0]}.")


@dataclass(frozen=True, eq=False)
class PartAnnotations:
    """Part keypoints and boxes of one split (CUB-200-2011, NABirds), in dataset order, exactly as
    read from disk.

    part_names          P names from ``parts/parts.txt``
    boxes               N×4 int64 ``(x1, y1, x2, y2)``: the ``bounding_boxes.txt`` floats truncated,
                        ``x2 = x1 + w``, ``y2 = y1 + h`` (docs/protocol/harness.md)
    part_xy             N×P×2 int64 raw image coordinates ``(int(float(x)), int(float(y)))``;
                        0 where the part is invisible (docs/protocol/metrics.md, "Inputs")
    part_visible        N×P bool
    segmentation_paths  ``segmentations/<class_dir>/<file>.png`` when that file exists, else None
    """

    part_names: list[str]
    boxes: np.ndarray
    part_xy: np.ndarray
    part_visible: np.ndarray
    segmentation_paths: list[Path | None]


@dataclass(frozen=True, eq=False)
class PartPolygons:
    """Part segmentation polygons of one split (PartImageNet), in dataset order, as read from disk.

    part_names  P names (the annotation file's categories in the order of their ids)
    polygons    per image, ``(part index, V×2 float64 vertices (x, y) in image pixels)`` of every
                polygon of its part annotations; the image's size is ``ImageDataset.image_sizes``
    """

    part_names: list[str]
    polygons: list[list[tuple[int, np.ndarray]]]


@dataclass(frozen=True, eq=False)
class PartMapFiles:
    """Colour-coded part maps of one split (FunnyBirds), in dataset order: one image per image, each
    pixel's colour naming its part (``colours``: colour → index into ``part_names``; other colours are
    no part). The maps are full-frame, as the images are."""

    part_names: list[str]
    paths: list[Path]
    colours: dict[tuple[int, int, int], int]


class ImageDataset(torch.utils.data.Dataset):
    """One split of a dataset; item ``i`` is ``(3×S×S normalised image, label, i)``.

    Datasets with keypoints and boxes (``annotations``: CUB-200-2011, NABirds) are cropped to the
    annotation box before the shared resize/normalise transform; the others (Dogs, Cars,
    PartImageNet with its ``part_polygons``, FunnyBirds with its ``part_maps``) use the full image
    (docs/protocol/harness.md).
    ``image_sizes``: N×2 ``(width, height)`` where the annotations give them (else None).
    """

    def __init__(
        self,
        *,
        name: str,
        root: Path,
        split: str,
        class_names: list[str],
        labels: np.ndarray,
        image_paths: list[Path],
        annotations: PartAnnotations | None,
        annotation_files: list[Path],
        image_size: int = 224,
        part_polygons: PartPolygons | None = None,
        image_sizes: np.ndarray | None = None,
        part_maps: PartMapFiles | None = None,
    ) -> None:
        self.name = name
        self.root = root
        self.split = split
        self.class_names = class_names
        self.labels = np.asarray(labels, dtype=np.int64)
        self.image_paths = image_paths
        self.annotations = annotations
        self.part_polygons = part_polygons
        self.part_maps = part_maps
        self.image_sizes = image_sizes
        self.annotation_files = annotation_files
        self.image_size = image_size
        self.transform = model_transform(image_size)
        self._fingerprint: str | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def normalised_with(self, mean: tuple[float, float, float], std: tuple[float, float, float]) -> ImageDataset:
        """This split with images normalised by ``mean``/``std`` (the trunk's) instead of ImageNet's."""
        self.transform = model_transform(self.image_size, mean, std)
        return self

    def __len__(self) -> int:
        return len(self.image_paths)

    def load_image(self, i: int) -> Image.Image:
        """The RGB image before resizing: cropped to its box for CUB-format data, full otherwise."""
        image = open_rgb(self.image_paths[i])
        if self.annotations is None:
            return image
        problem = box_outside_image(self.annotations.boxes[i], image.width, image.height, self.image_paths[i])
        if problem:
            raise ProtobenchError(problem[0].upper() + problem[1:] + ".")
        return crop_to_box(image, self.annotations.boxes[i])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int]:
        return self.transform(self.load_image(i)), int(self.labels[i]), i

    def fingerprint(self) -> str:
        """Short hex hash of this split: annotation files' bytes + (relative path, size) of its images
        and masks. Computed once per loaded split (a run asks for it per token cache and for its
        provenance; on a cluster filesystem each pass is one stat per image)."""
        if self._fingerprint is None:
            masks = [] if self.annotations is None else self.annotations.segmentation_paths
            self._fingerprint = split_fingerprint(
                name=self.name,
                split=self.split,
                root=self.root,
                annotation_files=self.annotation_files,
                content_files=[*self.image_paths, *(m for m in masks if m is not None)],
            )
        return self._fingerprint

    def __repr__(self) -> str:
        return (
            f"ImageDataset(name={self.name!r}, split={self.split!r}, images={len(self)}, "
            f"classes={self.num_classes}, root='{self.root}')"
        )
