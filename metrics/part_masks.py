"""Part masks in the 224 frame, and which parts lie under a prototype's peak (PartImageNet).

docs/protocol/metrics.md, "Parts given as masks". The keypoint rule (EvalProtoPNet
``util/eval_interpretability.py``, ``in_bbox((loc_y, loc_x), region_pred)``; :func:`metrics.parts.part_vectors`)
puts part p under the peak of a map when its keypoint lies in the peak's region, rows
``[max(0, r − 36), min(224, r + 36)]`` and the same for columns, both bounds inclusive. For a part
given as a mask the suite reads "lies under the peak" as **the region holds at least one pixel of
the mask** (the peak's box overlaps the mask): the keypoint rule applied to every pixel of the mask.
A mask of the one pixel a keypoint falls on therefore gives exactly the keypoint's part vector, so
consistency and stability on such masks equal their keypoint values (tests/metrics/test_part_masks.py).
A part is visible (``m[p] = 1``) when its mask holds a pixel of the frame.

Polygons (COCO ``segmentation``) reach the frame as the image does: scaled with the whole image
resized to 224 × 224 (``x · 224 / W``, ``y · 224 / H``; no crop), then rasterised at the pixel
centres with the even-odd rule (W. R. Franklin's PNPOLY crossing test): pixel (row i, col j) is in
a polygon when a ray from ``(j + 0.5, i + 0.5)`` crosses its edges an odd number of times. The
polygons of one part are united, as pycocotools' ``annToMask`` merges an annotation's polygons.

Masks are stored as one bit per (image, pixel, slot), up to :data:`MAX_PARTS_PER_IMAGE` distinct
parts per image (PartImageNet annotates at most 5), so a split's masks take N · 224² bytes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .parts import FRAME_SIZE, HALF_SIZE, region_bounds

MAX_PARTS_PER_IMAGE = 8  # bits of the uint8 slot planes
_CHUNK = 64  # images whose integral images are held at once (8 · 225² int32 = 1.6 MB each)


@dataclass(frozen=True)
class PartMasks:
    """Part masks of N images in the ``size × size`` frame.

    bits: (N, S, S) uint8; bit k of a pixel is set where the image's part in slot k covers it.
    slot_parts: (N, 8) int64, the part index (0 … P − 1) held by each slot, −1 for an unused slot;
        an image's parts are distinct.
    num_parts: P, the length of the part vector.
    """

    bits: Tensor
    slot_parts: Tensor
    num_parts: int

    def __post_init__(self) -> None:
        bits, slots = self.bits, self.slot_parts
        if not isinstance(bits, Tensor) or bits.dim() != 3 or bits.shape[1] != bits.shape[2] or bits.dtype != torch.uint8:
            shape = (tuple(bits.shape), bits.dtype) if isinstance(bits, Tensor) else type(bits).__name__
            raise ValueError(f"bits: expected a uint8 tensor of shape (N, S, S), got {shape}")
        n = bits.shape[0]
        if not isinstance(slots, Tensor) or tuple(slots.shape) != (n, MAX_PARTS_PER_IMAGE) or slots.dtype != torch.int64:
            shape = (tuple(slots.shape), slots.dtype) if isinstance(slots, Tensor) else type(slots).__name__
            raise ValueError(f"slot_parts: expected an int64 tensor of shape ({n}, {MAX_PARTS_PER_IMAGE}), got {shape}")
        if isinstance(self.num_parts, bool) or not isinstance(self.num_parts, int) or self.num_parts < 1:
            raise ValueError(f"num_parts: expected a positive int, got {self.num_parts!r}")
        if slots.device != bits.device:
            raise ValueError(f"slot_parts: on {slots.device}, but bits is on {bits.device}")
        if n and (int(slots.min()) < -1 or int(slots.max()) >= self.num_parts):
            raise ValueError(f"slot_parts: values must lie in [-1, {self.num_parts}), "
                             f"got range [{int(slots.min())}, {int(slots.max())}]")
        used = slots >= 0
        same = (slots[:, :, None] == slots[:, None, :]) & used[:, :, None] & used[:, None, :]
        if bool((same & ~torch.eye(MAX_PARTS_PER_IMAGE, dtype=torch.bool, device=slots.device)).any()):
            raise ValueError("slot_parts: a part holds two slots of one image")
        unused_bits = (~used).to(torch.int64) << torch.arange(MAX_PARTS_PER_IMAGE, device=slots.device)
        if n and bool((bits.to(torch.int64) & unused_bits.sum(dim=1)[:, None, None]).any()):
            raise ValueError("bits: a pixel sets the bit of an unused slot")

    @property
    def num_images(self) -> int:
        return int(self.bits.shape[0])

    @property
    def size(self) -> int:
        return int(self.bits.shape[1])

    def planes(self, index: slice | Tensor = slice(None)) -> Tensor:
        """(n, 8, S, S) bool: the slots' masks of the images ``index``."""
        shifts = torch.arange(MAX_PARTS_PER_IMAGE, device=self.bits.device, dtype=torch.uint8)
        return ((self.bits[index][:, None] >> shifts[None, :, None, None]) & 1).bool()

    @property
    def visible(self) -> Tensor:
        """(N, P) bool, the part vector ``m``: the part's mask holds a pixel of the frame."""
        filled = torch.stack([((self.bits >> k) & 1).flatten(1).any(dim=1) for k in range(MAX_PARTS_PER_IMAGE)], 1)
        out = torch.zeros((self.num_images, self.num_parts), dtype=torch.bool, device=self.bits.device)
        rows, slots = torch.nonzero((self.slot_parts >= 0) & filled, as_tuple=True)
        out[rows, self.slot_parts[rows, slots]] = True
        return out

    def foreground(self) -> Tensor:
        """(N, S, S) bool: the union of every part's mask (the object)."""
        return self.bits != 0

    def to(self, device: torch.device | str) -> PartMasks:
        return PartMasks(self.bits.to(device), self.slot_parts.to(device), self.num_parts)

    def __getitem__(self, index: slice | Tensor) -> PartMasks:
        return PartMasks(self.bits[index], self.slot_parts[index], self.num_parts)


def pack_part_masks(images: Sequence[Mapping[int, np.ndarray | Tensor]], num_parts: int,
                    size: int = FRAME_SIZE) -> PartMasks:
    """:class:`PartMasks` from each image's ``{part index: (size, size) bool mask}`` (at most
    :data:`MAX_PARTS_PER_IMAGE` parts per image; slots follow the parts' order)."""
    bits = torch.zeros((len(images), size, size), dtype=torch.uint8)
    slots = torch.full((len(images), MAX_PARTS_PER_IMAGE), -1, dtype=torch.int64)
    for i, parts in enumerate(images):
        if len(parts) > MAX_PARTS_PER_IMAGE:
            raise ValueError(f"image {i}: {len(parts)} parts, at most {MAX_PARTS_PER_IMAGE} fit one image's slots")
        for k, (part, mask) in enumerate(sorted(parts.items())):
            plane = torch.as_tensor(np.asarray(mask) if not isinstance(mask, Tensor) else mask.cpu())
            if tuple(plane.shape) != (size, size) or plane.dtype != torch.bool:
                raise ValueError(f"image {i} part {part}: expected a ({size}, {size}) bool mask, "
                                 f"got {tuple(plane.shape)} {plane.dtype}")
            if not 0 <= part < num_parts:
                raise ValueError(f"image {i}: part {part} outside [0, {num_parts})")
            slots[i, k] = part
            bits[i] |= plane.to(torch.uint8) << k
    return PartMasks(bits, slots, num_parts)


def polygon_to_frame(vertices: np.ndarray, width: int, height: int, size: int = FRAME_SIZE) -> np.ndarray:
    """(size, size) bool: the pixels of the frame whose centres lie in the polygon ``vertices``
    ((V, 2) ``x, y`` in the pixels of a ``width × height`` image), scaled with the image.

    PNPOLY (Franklin): for the row of centre ``y``, edge (i, j) counts when ``(y_i > y) != (y_j > y)``
    and the centre lies left of ``x = (x_j − x_i)(y − y_i)/(y_j − y_i) + x_i``; an odd count is inside.
    With this rule a pixel on a left or top edge is in, on a right or bottom edge out, so an axis-aligned
    rectangle ``[x0, x1) × [y0, y1)`` selects exactly the centres inside it."""
    v = np.asarray(vertices, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] != 2 or v.shape[0] < 3:
        raise ValueError(f"vertices: expected (V, 2) with V >= 3, got {v.shape}")
    xi, yi = v[:, 0] * size / width, v[:, 1] * size / height  # the image's Resize((S, S)) of pixel edges
    xj, yj = np.roll(xi, 1), np.roll(yi, 1)  # PNPOLY's j = i - 1
    centres = np.arange(size, dtype=np.float64) + 0.5
    # only rows whose centre lies in [min y, max y] can cross an edge
    first, last = np.searchsorted(centres, yi.min(), side="left"), np.searchsorted(centres, yi.max(), side="right")
    y = centres[first:last, None]  # (R, 1) row centres
    crosses = (yi > y) != (yj > y)  # (R, V)
    with np.errstate(divide="ignore", invalid="ignore"):
        x_cross = (xj - xi) * (y - yi) / (yj - yi) + xi  # only read where crosses (yj != yi there)
    rows, edges = np.nonzero(crosses)
    # columns whose centre lies left of the crossing: the first searchsorted(centres, x) of the row
    first_right = np.searchsorted(centres, x_cross[rows, edges], side="left")
    right_of = np.bincount(rows * (size + 1) + first_right, minlength=(last - first) * (size + 1))
    count = right_of.reshape(-1, size + 1)[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]  # crossings right of a column
    mask = np.zeros((size, size), dtype=bool)
    mask[first:last] = (count % 2) == 1
    return mask


def polygons_to_frame(polygons: Sequence[np.ndarray], width: int, height: int, size: int = FRAME_SIZE) -> np.ndarray:
    """(size, size) bool: the union of :func:`polygon_to_frame` of ``polygons``."""
    mask = np.zeros((size, size), dtype=bool)
    for vertices in polygons:
        mask |= polygon_to_frame(vertices, width, height, size)
    return mask


def mask_part_vectors(centres: Tensor, masks: PartMasks, half_size: int = HALF_SIZE, size: int = FRAME_SIZE) -> Tensor:
    """Part vector ``o`` of every (image, prototype) from part masks: (N, J, P) bool.

    centres: (N, J, 2) peak positions ``(row, col)`` in the frame. ``o[p]`` is set when the peak's
    region (:func:`metrics.parts.region_bounds`, inclusive) holds a pixel of part p's mask, counted
    with an integral image of each slot (Crow 1984, summed-area tables)."""
    if centres.dim() != 3 or centres.shape[2] != 2:
        raise ValueError(f"centres: expected shape (N, J, 2), got {tuple(centres.shape)}")
    if masks.num_images != centres.shape[0]:
        raise ValueError(f"parts: has {masks.num_images} images, centres has {centres.shape[0]}")
    if masks.size != size:
        raise ValueError(f"parts: masks are {masks.size} × {masks.size}, the frame is {size} × {size}")
    n, j = centres.shape[:2]
    dev = centres.device
    masks = masks.to(dev)
    bounds = region_bounds(centres, half_size, size)
    r1, c1 = bounds[..., 0], bounds[..., 2]
    r2, c2 = bounds[..., 1].clamp(max=size - 1), bounds[..., 3].clamp(max=size - 1)  # no pixel past the frame
    o = torch.zeros((n, j, masks.num_parts), dtype=torch.bool, device=dev)
    side = size + 1
    for start in range(0, n, _CHUNK):
        sl = slice(start, min(start + _CHUNK, n))
        m = sl.stop - sl.start
        table = torch.zeros((m, MAX_PARTS_PER_IMAGE, side, side), dtype=torch.int32, device=dev)
        table[:, :, 1:, 1:] = masks.planes(sl).to(torch.int32).cumsum(2).cumsum(3)
        flat = table.flatten(2)  # (m, 8, side²)

        def at(rows: Tensor, cols: Tensor) -> Tensor:
            index = (rows * side + cols)[:, None, :].expand(m, MAX_PARTS_PER_IMAGE, j)
            return flat.gather(2, index)  # (m, 8, J)

        inside = (at(r2[sl] + 1, c2[sl] + 1) - at(r1[sl], c2[sl] + 1)
                  - at(r2[sl] + 1, c1[sl]) + at(r1[sl], c1[sl]))  # pixels of each slot in each region
        hit = inside > 0
        part = masks.slot_parts[sl]
        chunk = o[sl]
        for k in range(MAX_PARTS_PER_IMAGE):
            rows = torch.nonzero(part[:, k] >= 0).squeeze(1)
            chunk[rows, :, part[rows, k]] |= hit[rows, k, :]  # chunk is a view of o
    return o
