"""Evaluation metrics of protobench: pure functions of activation maps and annotations.

Definitions: ``docs/protocol/metrics.md``. Entry point: :func:`explanation_metrics`; accuracy:
:func:`accuracy`. All scores are in percent; ``None`` marks an undefined / not computable
value (distinctiveness with J = 1, stability without noisy maps, comprehensiveness without masks).
"""
from .accuracy import accuracy, logit_margins
from .comprehensiveness import comprehensiveness, foreground_union, mask_iou, segmentation_to_frame
from .consistency import consistency, consistency_flags, consistency_score, part_hit_ratios
from .distinctiveness import distinctiveness, distinctiveness_score, iou_72, mean_pairwise_iou
from .explanation import METRIC_KEYS, ExplanationRecords, explanation_metrics, explanation_records
from .float32_bilinear import nppp_peaks
from .maps import (
    TIE_RTOL,
    argmax_positions,
    map_scale,
    peak_positions,
    pool_maps,
    select_topk_maps,
    upsample_maps,
)
from .part_masks import MAX_PARTS_PER_IMAGE, PartMasks, mask_part_vectors, pack_part_masks, polygons_to_frame
from .part_truth import PartTruth, truth_vectors
from .parts import (
    FRAME_SIZE,
    HALF_SIZE,
    PartGroundTruth,
    boxes_from_xywh,
    map_parts_to_frame,
    part_vectors,
    region_bounds,
)
from .stability import stability, stability_score, unchanged_fractions

__all__ = [
    "FRAME_SIZE",
    "HALF_SIZE",
    "MAX_PARTS_PER_IMAGE",
    "METRIC_KEYS",
    "TIE_RTOL",
    "PartGroundTruth",
    "PartMasks",
    "PartTruth",
    "accuracy",
    "argmax_positions",
    "boxes_from_xywh",
    "comprehensiveness",
    "consistency",
    "consistency_flags",
    "consistency_score",
    "distinctiveness",
    "distinctiveness_score",
    "ExplanationRecords",
    "explanation_metrics",
    "explanation_records",
    "foreground_union",
    "iou_72",
    "logit_margins",
    "map_parts_to_frame",
    "map_scale",
    "mask_part_vectors",
    "mask_iou",
    "mean_pairwise_iou",
    "nppp_peaks",
    "pack_part_masks",
    "part_hit_ratios",
    "part_vectors",
    "peak_positions",
    "polygons_to_frame",
    "pool_maps",
    "region_bounds",
    "segmentation_to_frame",
    "select_topk_maps",
    "stability",
    "stability_score",
    "truth_vectors",
    "unchanged_fractions",
    "upsample_maps",
]
