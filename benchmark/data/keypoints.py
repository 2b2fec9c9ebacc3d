"""Part keypoints of ``parts/part_locs.txt`` (CUB-200-2011, NABirds) as arrays of one split, checked
line by line: every (image, part) pair of the dataset appears exactly once, with a listed image, a
part of ``parts/parts.txt`` and a 0/1 visibility flag."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from benchmark.data.tables import TableFile
from benchmark.errors import ProtobenchError


def keypoint_arrays(
    table: TableFile,
    line_image: np.ndarray,
    line_ids: Sequence[object],
    values: np.ndarray,
    image_ids: Sequence[object],
    split_images: np.ndarray,
    first_part: int,
    num_parts: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``part_xy`` (n×P×2 int64, ``int(float(·))``, 0 where hidden) and ``part_visible`` (n×P) of
    the n images ``split_images`` (indices into ``image_ids``, the dataset's images).

    Per line of ``table``: ``line_image`` the index of its image in ``image_ids`` (−1: not listed),
    ``line_ids`` its image id as written, ``values`` (part id, x, y, visible) as floats. Part ids run
    from ``first_part`` (CUB 1, NABirds 0)."""
    flags = values[:, [0, 3]]
    bad = np.flatnonzero((flags != np.trunc(flags)).any(axis=1))
    if bad.size:
        raise table.row_error(bad[0], "the part id and the visibility flag must be integers")
    bad = np.flatnonzero(line_image < 0)
    if bad.size:
        raise table.row_error(bad[0], f"image id {line_ids[bad[0]]} is not listed in images.txt")
    part = values[:, 0].astype(np.int64) - first_part
    bad = np.flatnonzero((part < 0) | (part >= num_parts))
    if bad.size:
        raise table.row_error(bad[0], f"part id {part[bad[0]] + first_part} is not listed in parts/parts.txt "
                                      f"(ids {first_part}..{first_part + num_parts - 1})")
    visible = values[:, 3].astype(np.int64)
    bad = np.flatnonzero((visible != 0) & (visible != 1))
    if bad.size:
        raise table.row_error(bad[0], f"the visibility flag must be 0 or 1, got {visible[bad[0]]}")

    pair = line_image * num_parts + part
    order = np.argsort(pair, kind="stable")
    repeated = order[1:][pair[order][1:] == pair[order][:-1]]
    if repeated.size:
        row = repeated.min()
        raise table.row_error(row, f"image {line_ids[row]} part {part[row] + first_part} already has a location")
    seen = np.zeros(len(image_ids) * num_parts, dtype=bool)
    seen[pair] = True
    if not seen.all():
        k, p = divmod(int(np.flatnonzero(~seen)[0]), num_parts)
        raise ProtobenchError(
            f"{table.path} has no line for image {image_ids[k]} part {p + first_part} "
            f"({int((~seen).sum())} (image, part) pairs missing in all); {table.fix}."
        )

    row_of = np.full(len(image_ids), -1, dtype=np.int64)
    row_of[split_images] = np.arange(len(split_images))
    row = row_of[line_image]
    keep = (row >= 0) & (visible == 1)
    part_xy = np.zeros((len(split_images), num_parts, 2), dtype=np.int64)
    part_xy[row[keep], part[keep]] = values[keep][:, 1:3].astype(np.int64)  # truncation toward zero
    part_visible = np.zeros((len(split_images), num_parts), dtype=bool)
    part_visible[row[keep], part[keep]] = True
    return part_xy, part_visible
