"""Part keypoints in the 224 frame, prototype regions and part vectors.

docs/protocol/metrics.md, sections "Inputs" and "Shared core: the part vector of (prototype, image)";
official code: EvalProtoPNet ``util/local_parts.py`` (parsing, ``in_bbox``) and
``util/eval_interpretability.py::get_corresponding_object_parts`` (mapping, region, o / m).

Conventions: parts are ``(x, y) = (col, row)``; map positions (argmax, region centres) are
``(row, col)``, as ``np.where`` returns them in the official code.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ._checks import check_bool

FRAME_SIZE = 224  # docs/protocol/metrics.md "Inputs": images cropped to the box and resized to 224 x 224
HALF_SIZE = 36  # docs/protocol/metrics.md step 3; EvalProtoPNet evaluate_consistency(half_size=36)


@dataclass(frozen=True)
class PartGroundTruth:
    """Part keypoints of N images mapped into the ``size x size`` frame of the cropped image.

    part_px: (N, P, 2) int64, ``(x, y) = (col, row)``; values of invisible parts are
        meaningless (CUB stores 0, 0) and never used.
    visible: (N, P) bool, the part vector ``m`` of docs/protocol/metrics.md.
    """

    part_px: Tensor
    visible: Tensor

    def __post_init__(self) -> None:
        px, vis = self.part_px, self.visible
        if not isinstance(px, Tensor) or px.dim() != 3 or px.shape[2] != 2:
            shape = tuple(px.shape) if isinstance(px, Tensor) else type(px).__name__
            raise ValueError(f"part_px: expected a tensor of shape (N, P, 2), got {shape}")
        if px.dtype != torch.int64:
            raise ValueError(f"part_px: expected dtype torch.int64, got {px.dtype}")
        check_bool("visible", vis, tuple(px.shape[:2]))
        if vis.device != px.device:
            raise ValueError(f"visible: on {vis.device}, but part_px is on {px.device}")

    @property
    def num_images(self) -> int:
        return int(self.part_px.shape[0])

    @property
    def num_parts(self) -> int:
        return int(self.part_px.shape[1])

    def to(self, device: torch.device | str) -> "PartGroundTruth":
        return PartGroundTruth(self.part_px.to(device), self.visible.to(device))

    def __getitem__(self, index: slice | Tensor) -> "PartGroundTruth":
        return PartGroundTruth(self.part_px[index], self.visible[index])


def check_parts(parts: object, n: int, maps_name: str) -> PartGroundTruth:
    """``parts`` must be a :class:`PartGroundTruth` of the ``n`` images of ``maps_name``."""
    if not isinstance(parts, PartGroundTruth):
        raise ValueError(f"parts: expected a PartGroundTruth, got {type(parts).__name__}")
    if parts.num_images != n:
        raise ValueError(f"parts: has {parts.num_images} images, {maps_name} has {n}")
    return parts


def _as_tensor(name: str, x: object) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (np.ndarray, list, tuple)):
        return torch.as_tensor(np.asarray(x))
    raise ValueError(f"{name}: expected a numpy array or torch.Tensor, got {type(x).__name__}")


def _truncate_to_int(x: Tensor) -> Tensor:
    """``int(float(v))`` element-wise: truncation toward zero (docs/protocol/metrics.md "Inputs")."""
    if x.is_floating_point():
        return torch.trunc(x.to(torch.float64)).to(torch.int64)
    return x.to(torch.int64)


def boxes_from_xywh(xywh: np.ndarray | Tensor) -> Tensor:
    """``bounding_boxes.txt`` values ``(x, y, w, h)`` -> integer ``(x1, y1, x2, y2)``, shape (N, 4).

    EvalProtoPNet ``util/local_parts.py``: each value truncated (``int(s.split('.')[0])``),
    then ``x2 = x + w``, ``y2 = y + h``. Example (docs/protocol/metrics.md): ``60.0 27.0 325.0 304.0`` ->
    ``(60, 27, 385, 331)``.
    """
    t = _as_tensor("xywh", xywh)
    if t.dim() != 2 or t.shape[1] != 4:
        raise ValueError(f"xywh: expected shape (N, 4), got {tuple(t.shape)}")
    t = _truncate_to_int(t)
    return torch.stack([t[:, 0], t[:, 1], t[:, 0] + t[:, 2], t[:, 1] + t[:, 3]], dim=1)


def map_parts_to_frame(
    part_xy: np.ndarray | Tensor,
    boxes: np.ndarray | Tensor,
    visible: np.ndarray | Tensor,
    size: int = FRAME_SIZE,
) -> PartGroundTruth:
    """Map raw part keypoints into the ``size x size`` frame of the box-cropped image.

    part_xy: (N, P, 2) raw ``(x, y)`` of ``parts/part_locs.txt``; floats are truncated toward
        zero first (``int(float(x))``, docs/protocol/metrics.md "Inputs").
    boxes: (N, 4) integer ``(x1, y1, x2, y2)`` (see :func:`boxes_from_xywh`).
    visible: (N, P) bool (or 0/1) visibility flags.

    Formula of EvalProtoPNet ``get_corresponding_object_parts``:
    ``ratio_x = (x - x1) / (x2 - x1)``; ``px = int(size * ratio_x)`` (float64, ``int`` truncating
    toward zero, so a part 1 px left of the box maps to 0, not -1). This evaluation order
    (ratio first) is the official code's; docs/protocol/metrics.md writes ``int(224 * (x - x1) / (x2 - x1))``,
    which differs in rare cases where the exact value is an integer (e.g. ``x - x1 = 61``,
    width 224: code 60, literal formula 61). The code is the reference (docs/protocol/metrics.md preamble).
    """
    xy = _truncate_to_int(_as_tensor("part_xy", part_xy))
    if xy.dim() != 3 or xy.shape[2] != 2:
        raise ValueError(f"part_xy: expected shape (N, P, 2), got {tuple(xy.shape)}")
    b = _as_tensor("boxes", boxes)
    if b.dim() != 2 or b.shape != (xy.shape[0], 4):
        raise ValueError(f"boxes: expected shape ({xy.shape[0]}, 4), got {tuple(b.shape)}")
    b = _truncate_to_int(b).to(xy.device)
    vis = _as_tensor("visible", visible)
    if tuple(vis.shape) != tuple(xy.shape[:2]):
        raise ValueError(f"visible: expected shape {tuple(xy.shape[:2])}, got {tuple(vis.shape)}")
    vis = vis.to(device=xy.device, dtype=torch.bool)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size: expected a positive int, got {size!r}")

    x1, y1, x2, y2 = (b[:, k : k + 1] for k in range(4))  # (N, 1) each
    width, height = x2 - x1, y2 - y1
    if xy.shape[0] and (bool((width <= 0).any()) or bool((height <= 0).any())):
        bad = int(torch.nonzero((width <= 0) | (height <= 0))[0, 0])
        raise ValueError(f"boxes: image {bad} has an empty box {tuple(b[bad].tolist())} (need x2 > x1 and y2 > y1)")
    # local_parts/eval_interpretability: ratio = loc / (x2 - x1), re_loc = int(img_size * ratio)
    ratio_x = (xy[..., 0] - x1).to(torch.float64) / width.to(torch.float64)
    ratio_y = (xy[..., 1] - y1).to(torch.float64) / height.to(torch.float64)
    px = torch.trunc(size * ratio_x).to(torch.int64)  # int(): truncation toward zero, not floor
    py = torch.trunc(size * ratio_y).to(torch.int64)
    return PartGroundTruth(part_px=torch.stack([px, py], dim=-1), visible=vis)


def region_bounds(centres: Tensor, half_size: int = HALF_SIZE, size: int = FRAME_SIZE) -> Tensor:
    """Region of a prototype around its argmax ``(r, c)``: ``(..., 4)`` = ``(r1, r2, c1, c2)``.

    docs/protocol/metrics.md step 3 / EvalProtoPNet ``region_pred``: ``r1 = max(0, r - 36)``,
    ``r2 = min(224, r + 36)``, likewise for columns; both bounds inclusive (``in_bbox``).
    """
    r, c = centres[..., 0], centres[..., 1]
    return torch.stack(
        [
            (r - half_size).clamp(min=0),  # max(0, r - half_size)
            (r + half_size).clamp(max=size),  # min(img_size, r + half_size)
            (c - half_size).clamp(min=0),
            (c + half_size).clamp(max=size),
        ],
        dim=-1,
    )


def part_vectors(
    centres: Tensor, parts: PartGroundTruth, half_size: int = HALF_SIZE, size: int = FRAME_SIZE
) -> Tensor:
    """Part vector ``o`` of every (image, prototype): (N, J, P) bool.

    centres: (N, J, 2) argmax positions ``(row, col)`` in the frame.
    docs/protocol/metrics.md step 4 / EvalProtoPNet ``in_bbox((loc_y, loc_x), region_pred)``:
    ``o[p] = visible[p] and r1 <= py <= r2 and c1 <= px <= c2``.
    """
    if centres.dim() != 3 or centres.shape[2] != 2:
        raise ValueError(f"centres: expected shape (N, J, 2), got {tuple(centres.shape)}")
    if parts.num_images != centres.shape[0]:
        raise ValueError(f"parts: has {parts.num_images} images, centres has {centres.shape[0]}")
    parts = parts.to(centres.device)
    bounds = region_bounds(centres, half_size, size)[:, :, None, :]  # (N, J, 1, 4)
    px = parts.part_px[:, None, :, 0]  # (N, 1, P) column
    py = parts.part_px[:, None, :, 1]  # (N, 1, P) row
    inside = (
        (bounds[..., 0] <= py) & (py <= bounds[..., 1])  # r1 <= py <= r2 (inclusive)
        & (bounds[..., 2] <= px) & (px <= bounds[..., 3])  # c1 <= px <= c2 (inclusive)
    )
    return inside & parts.visible[:, None, :]  # only visible parts are annotated
