"""Distinctiveness (%): docs/protocol/metrics.md section "Distinctiveness".

Official code: NPPP ``eval/distinctiveness.py::batch_mean_IoU_bbox`` (72-px boxes centred on
each map's argmax after bilinear upsampling, ``torchvision.ops.box_iou`` of the unclipped
boxes, mean over the upper-triangle pairs), score ``1 - mean over images``, here times 100.
The box centres are the official ones, ties included: float32 pooling and upsampling as torch
computes them, then the first strict maximum (:func:`metrics.float32_bilinear.nppp_peaks`).

Undefined case: with J = 1 (or topk = 1) there are no pairs; the functions then return
``None``, which callers report as "undefined" (never a number, never an exception).
They also return ``None`` for zero images.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_maps
from .float32_bilinear import nppp_peaks
from .maps import iter_chunks, select_topk_maps

BOX_SIZE = 72  # NPPP evaluate_distinctiveness(box_size=72)


def iou_72(a: Tensor, b: Tensor, box_size: int = BOX_SIZE) -> Tensor:
    """IoU of the ``box_size`` square boxes centred at ``a`` and ``b`` (``(..., 2)``, broadcast).

    docs/protocol/metrics.md: boxes ``[c - 36, c + 36]``, not clipped to the image; continuous areas
    (``box_iou`` on xyxy corners, no +1): ``inter = max(0, 72 - |dx|) * max(0, 72 - |dy|)``,
    ``IoU = inter / (2 * 72^2 - inter)``. Returns float64.
    """
    d = (a.to(torch.float64) - b.to(torch.float64)).abs()
    inter = (box_size - d[..., 0]).clamp(min=0) * (box_size - d[..., 1]).clamp(min=0)
    return inter / (2.0 * box_size * box_size - inter)


def mean_pairwise_iou(centres: Tensor, box_size: int = BOX_SIZE) -> Tensor:
    """(N, J, 2) box centres -> (N,) float64 mean IoU over the J(J-1)/2 pairs of each image.

    NPPP: ``iou_matrix[i, j]`` for ``i < j``; ``iou_matrix[triu(diagonal=1)].mean()``.
    Needs J >= 2 (raises ValueError otherwise; :func:`distinctiveness_score` returns None).
    """
    if centres.dim() != 3 or centres.shape[2] != 2:
        raise ValueError(f"centres: expected shape (N, J, 2), got {tuple(centres.shape)}")
    j = centres.shape[1]
    if j < 2:
        raise ValueError(f"centres: J = {j}, pairwise IoU needs at least 2 boxes per image")
    iou = iou_72(centres[:, :, None, :], centres[:, None, :, :], box_size)  # (N, J, J)
    upper = torch.ones((j, j), dtype=torch.bool, device=centres.device).triu(diagonal=1)
    return iou[:, upper].mean(dim=1)


def distinctiveness_score(centres: Tensor, box_size: int = BOX_SIZE) -> float | None:
    """Distinctiveness in percent from (N, J, 2) box centres: ``100 * (1 - mean_i meanIoU_i)``.

    ``None`` (undefined) for J = 1 or N = 0.
    """
    if centres.dim() != 3 or centres.shape[2] != 2:
        raise ValueError(f"centres: expected shape (N, J, 2), got {tuple(centres.shape)}")
    if centres.shape[1] < 2 or centres.shape[0] == 0:
        return None
    return 100.0 * (1.0 - float(mean_pairwise_iou(centres, box_size).mean()))  # score = 1 - mean(IoUs)


def distinctiveness(
    maps: Tensor,
    *,
    map_pool: int = 1,
    chunk_size: int | None = None,
    topk: int | None = None,
) -> float | None:
    """Distinctiveness (%) from the (N, J, h, w) maps of each image's ground-truth class prototypes.

    float32 bilinear upsampling -> first strict maximum, as NPPP's code breaks ties
    (:func:`metrics.float32_bilinear.nppp_peaks`) -> unclipped 72-px boxes -> :func:`distinctiveness_score`.
    ``topk``: NPPP's selection of the top-k maps by peak value (default None: all J, docs/protocol/metrics.md).
    ``None`` when undefined (fewer than 2 maps per image, or no image).
    """
    check_maps("maps", maps)
    maps = select_topk_maps(maps, topk)
    if maps.shape[1] < 2 or maps.shape[0] == 0:
        return None
    centres = torch.cat([nppp_peaks(maps[sl], map_pool) for sl in iter_chunks(maps.shape[0], chunk_size, maps.device)])
    return distinctiveness_score(centres)
