"""metrics.parts: part mapping into the 224 frame, regions, part vectors
(docs/protocol/metrics.md "Inputs", "Shared core" steps 3-4, "Known answers": part mapping and region)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from metrics import PartGroundTruth, boxes_from_xywh, map_parts_to_frame, part_vectors, region_bounds

BOX = (60, 27, 385, 331)  # from the box line "60.0 27.0 325.0 304.0"


def _map_one(x: float, y: float, box: tuple[int, int, int, int] = BOX) -> tuple[int, int]:
    gt = map_parts_to_frame(np.array([[[x, y]]]), np.array([box]), np.array([[True]]))
    return tuple(gt.part_px[0, 0].tolist())


def test_box_line_to_corners() -> None:
    assert boxes_from_xywh(np.array([[60.0, 27.0, 325.0, 304.0]])).tolist() == [list(BOX)]
    # truncation of each value before x2 = x + w: 60.9 -> 60, 325.9 -> 325
    assert boxes_from_xywh(torch.tensor([[60.9, 27.2, 325.9, 304.5]])).tolist() == [list(BOX)]


@pytest.mark.parametrize(
    ("xy", "expected"),
    [
        ((200.5, 150.2), (96, 90)),  # int(200.5)=200: 224*140/325 = 96.49; int(150.2)=150: 224*123/304 = 90.63
        ((59.0, 27.0), (0, 0)),  # x = 59: 224*(-1)/325 = -0.69 -> int() -> 0 (floor would give -1)
        ((385.0, 331.0), (224, 224)),  # box corner x2, y2
        ((60.0, 27.0), (0, 0)),  # box corner x1, y1
    ],
)
def test_part_mapping_known_answers(xy: tuple[float, float], expected: tuple[int, int]) -> None:
    assert _map_one(*xy) == expected


def test_truncation_toward_zero_for_negative_offsets() -> None:
    # x - x1 = -10: 224 * (-10/325) = -6.89 -> -6 (int), not -7 (floor); y - y1 = -27: 224*(-27/304) = -19.89 -> -19
    assert _map_one(50.0, 0.0) == (-6, -19)
    # raw floats truncate toward zero before mapping: int(float("-0.7")) = 0 -> x - x1 = -60
    assert _map_one(-0.7, 27.0) == (int(224 * (-60 / 325)), 0) == (-41, 0)


def test_official_evaluation_order_ratio_first() -> None:
    # EvalProtoPNet: ratio = loc / w, then int(224 * ratio). For w = 224, loc = 61 the ratio is
    # 0.27232142857142855 and 224 * ratio = 60.99999999999999 -> 60 (224 * 61 / 224 would give 61).
    assert _map_one(61.0, 0.0, box=(0, 0, 224, 224)) == (60, 0)
    assert int(224 * (61 / 224)) == 60


def test_mapping_accepts_torch_and_keeps_visibility() -> None:
    xy = torch.tensor([[[200, 150], [0, 0]], [[61, 5], [100, 100]]])
    boxes = torch.tensor([list(BOX), [0, 0, 224, 224]])
    vis = torch.tensor([[1, 0], [1, 1]])
    gt = map_parts_to_frame(xy, boxes, vis)
    assert gt.part_px.dtype == torch.int64 and gt.visible.dtype == torch.bool
    assert gt.part_px[0, 0].tolist() == [96, 90]
    assert gt.visible.tolist() == [[True, False], [True, True]]


def test_mapping_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="part_xy"):
        map_parts_to_frame(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((2, 3), bool))
    with pytest.raises(ValueError, match="boxes"):
        map_parts_to_frame(np.zeros((2, 3, 2)), np.zeros((3, 4)), np.zeros((2, 3), bool))
    with pytest.raises(ValueError, match="boxes.*empty"):
        map_parts_to_frame(np.zeros((1, 3, 2)), np.array([[5, 5, 5, 9]]), np.zeros((1, 3), bool))
    with pytest.raises(ValueError, match="visible"):
        map_parts_to_frame(np.zeros((2, 3, 2)), np.ones((2, 4)) * [0, 0, 9, 9], np.zeros((2, 2), bool))
    with pytest.raises(ValueError, match="part_px"):
        PartGroundTruth(torch.zeros(2, 3, 2), torch.zeros(2, 3, dtype=torch.bool))


@pytest.mark.parametrize(
    ("centre", "bounds"),
    [((100, 100), (64, 136, 64, 136)), ((10, 220), (0, 46, 184, 224)), ((0, 224), (0, 36, 188, 224))],
)
def test_region_bounds_known_answers(centre: tuple[int, int], bounds: tuple[int, int, int, int]) -> None:
    assert tuple(region_bounds(torch.tensor(centre)).tolist()) == bounds


def _gt(parts_xy: list[tuple[int, int]], visible: list[bool] | None = None) -> PartGroundTruth:
    px = torch.tensor([parts_xy], dtype=torch.int64)
    vis = torch.tensor([visible if visible is not None else [True] * len(parts_xy)])
    return PartGroundTruth(px, vis)


def test_part_vector_inclusive_edges() -> None:
    centres = torch.tensor([[[100, 100]]])  # region rows 64..136, cols 64..136
    #           row136 in   row137 out   row64 in   row63 out   col136 in   col137 out  col64 in   col63 out
    parts = [(100, 136), (100, 137), (100, 64), (100, 63), (136, 100), (137, 100), (64, 100), (63, 100)]
    o = part_vectors(centres, _gt(parts))
    assert o[0, 0].tolist() == [True, False, True, False, True, False, True, False]


def test_part_vector_clamped_region_and_frame_edge() -> None:
    centres = torch.tensor([[[10, 220], [220, 220]]])  # (0, 46, 184, 224) and (184, 224, 184, 224)
    parts = [(224, 46), (224, 47), (184, 0), (183, 0), (224, 224)]  # (x, y)
    o = part_vectors(centres, _gt(parts))
    assert o[0, 0].tolist() == [True, False, True, False, False]
    assert o[0, 1].tolist() == [False, False, False, False, True]


def test_part_vector_ignores_invisible_parts_and_is_per_axis() -> None:
    centres = torch.tensor([[[100, 100]]])
    # (x, y) = (col, row): x=120, y=90 in; x=90, y=150 -> row 150 out; invisible part at the centre
    o = part_vectors(centres, _gt([(120, 90), (90, 150), (100, 100)], [True, True, False]))
    assert o[0, 0].tolist() == [True, False, False]


def test_part_vector_negative_coordinates_after_truncation() -> None:
    # a part 1 px left of the box maps to px = 0 (not -1) and is inside a region touching column 0
    gt = map_parts_to_frame(np.array([[[59, 100]]]), np.array([BOX]), np.array([[True]]))
    assert gt.part_px[0, 0, 0] == 0
    o = part_vectors(torch.tensor([[[int(gt.part_px[0, 0, 1]), 36]]]), gt)  # cols max(0, 0)..72
    assert bool(o[0, 0, 0])


def test_part_vectors_shape_errors() -> None:
    with pytest.raises(ValueError, match="centres"):
        part_vectors(torch.zeros(2, 2, dtype=torch.int64), _gt([(0, 0)]))
    with pytest.raises(ValueError, match="parts"):
        part_vectors(torch.zeros(2, 1, 2, dtype=torch.int64), _gt([(0, 0)]))
