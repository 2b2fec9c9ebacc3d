"""A split's part ground truth in the 224 frame, as the metrics read it: keypoints mapped into the
box crop (CUB-200-2011, NABirds: ``metrics.map_parts_to_frame``) or part masks rasterised from
the polygons on the whole image (PartImageNet: ``metrics.part_masks``); and the object masks of
comprehensiveness and localisation."""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from benchmark.data import ImageDataset
from metrics import FRAME_SIZE, PartMasks, PartTruth, map_parts_to_frame, pack_part_masks, polygons_to_frame
from metrics.comprehensiveness import segmentation_to_frame


def part_masks(dataset: ImageDataset) -> PartMasks:
    """The part masks of a split with ``part_polygons``: each part's polygons united in the frame."""
    polygons = dataset.part_polygons
    if polygons is None or dataset.image_sizes is None:
        raise ValueError(f"{dataset!r} has no part polygons")
    images = []
    for entries, (width, height) in zip(polygons.polygons, dataset.image_sizes.tolist()):
        by_part: dict[int, list[np.ndarray]] = {}
        for part, vertices in entries:
            by_part.setdefault(part, []).append(vertices)
        images.append({part: polygons_to_frame(shapes, width, height) for part, shapes in by_part.items()})
    return pack_part_masks(images, len(polygons.part_names))


def part_map_masks(dataset: ImageDataset) -> PartMasks:
    """The part masks of a split with colour-coded ``part_maps`` (FunnyBirds): the full map is the frame
    (as the images are resized); frame pixel (r, c) reads the map pixel holding its centre,
    ``((2r + 1) H) // (2S)`` (and likewise for c), and each part's colours are united."""
    maps = dataset.part_maps
    if maps is None:
        raise ValueError(f"{dataset!r} has no part maps")
    images = []
    for path in maps.paths:
        with Image.open(path) as image:
            source = np.asarray(image.convert("RGB"))
        centres = (2 * np.arange(FRAME_SIZE) + 1)
        rgb = source[centres * source.shape[0] // (2 * FRAME_SIZE)][:, centres * source.shape[1] // (2 * FRAME_SIZE)]
        code = (rgb[..., 0].astype(np.int64) << 16) | (rgb[..., 1].astype(np.int64) << 8) | rgb[..., 2]
        by_part: dict[int, np.ndarray] = {}
        for (r, g, b), part in maps.colours.items():
            hit = code == ((r << 16) | (g << 8) | b)
            if hit.any():
                by_part[part] = by_part[part] | hit if part in by_part else hit
        images.append(by_part)
    return pack_part_masks(images, len(maps.part_names))


def part_truth(dataset: ImageDataset) -> PartTruth | None:
    """Keypoints or part masks of the split's images in the frame; None without part annotations."""
    ann = dataset.annotations
    if ann is not None:
        return map_parts_to_frame(ann.part_xy, ann.boxes, ann.part_visible)
    if dataset.part_polygons is not None:
        return part_masks(dataset)
    if dataset.part_maps is not None:
        return part_map_masks(dataset)
    return None


def load_segmentation_masks(dataset: ImageDataset) -> torch.Tensor | None:
    """N×224×224 bool masks in the cropped frame (NPPP's protocol, ``segmentation_to_frame``);
    None if any mask is missing."""
    ann = dataset.annotations
    if ann is None or any(p is None or not p.exists() for p in ann.segmentation_paths):
        return None
    masks = []
    for i, path in enumerate(ann.segmentation_paths):
        with Image.open(path) as im:
            masks.append(segmentation_to_frame(np.asarray(im), tuple(int(v) for v in ann.boxes[i])))
    return torch.stack(masks)


def object_masks(dataset: ImageDataset, truth: PartTruth | None) -> torch.Tensor | None:
    """N×224×224 bool object masks: CUB's segmentation files, or the union of the part masks
    (PartImageNet, FunnyBirds); None where the split has neither."""
    if isinstance(truth, PartMasks):
        return truth.foreground()
    return load_segmentation_masks(dataset)
