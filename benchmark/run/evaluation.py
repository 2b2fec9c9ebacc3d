"""Evaluation of a trained method: accuracy on the test split and, on datasets with part
annotations (keypoints or masks: :mod:`benchmark.run.ground_truth`), the explanation metrics of
``docs/protocol/metrics.md`` from ground-truth-class activation maps.

One pass over the clean test tokens gives logits and maps (the appended block runs once per
batch for both: :func:`benchmark.run.prediction.block_output_reused`); a second pass over the noised view (stability
noise from the fixed ``STABILITY_NOISE_SEED``, the same perturbed images for every method and
seed) gives the maps stability compares against. The method runs under the run's precision
(bf16: autocast); metrics are computed in float32 outside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from benchmark.data import ImageDataset
from benchmark.cache.tokens import TokenSource
from benchmark.run.extra_metrics import deletion_count, extra_metrics
from benchmark.run.funnybirds_eval import FunnyBirdsData, funnybirds_evaluation
from benchmark.run.ground_truth import object_masks, part_truth
from benchmark.run.prediction import predict
from methods.base import PrototypeMethod
from metrics import ExplanationRecords, accuracy, explanation_records, logit_margins
from metrics.sanity import SanityScores, sanity


@dataclass
class Evaluated:
    """What :func:`evaluate` gives: ``summary`` (metrics, notes and settings: part of
    ``result.json``) and the ``per_image`` / ``per_prototype`` tables (:func:`record_tables`,
    stored by :mod:`benchmark.run.records`)."""

    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]


def record_tables(dataset: ImageDataset, logits: torch.Tensor, labels: torch.Tensor,
                  explained: ExplanationRecords | None, checked: SanityScores | None = None,
                  protocols: dict[str, Any] | None = None) -> dict[str, pd.DataFrame]:
    """The ``per_image`` (and, with explanation metrics, ``per_prototype``) tables of one evaluation;
    ``protocols``: the FunnyBirds protocols' per-image columns."""
    predicted = logits.argmax(dim=1)  # metrics.accuracy: the first maximal logit
    per_image = pd.DataFrame({
        "index": range(len(labels)),
        "image": [str(Path(p).relative_to(dataset.root)) if Path(p).is_relative_to(dataset.root) else str(p)
                  for p in dataset.image_paths],
        "label": labels.numpy(),
        "predicted": predicted.numpy(),
        "correct": (predicted == labels).numpy(),
        "margin": logit_margins(logits, labels).numpy(),
    })
    tables = {"per_image": per_image}
    for name, values in (protocols or {}).items():
        per_image[name] = values
    if checked is not None:  # percent, NaN where ρ is undefined; the SSIM beside it (metrics/sanity.py)
        per_image["sanity"] = checked.per_image.numpy()
        per_image["sanity_signed"] = checked.per_image_signed.numpy()
        per_image["sanity_ssim"] = checked.ssim.numpy()
    if explained is not None:
        for name, values in explained.per_image.items():
            per_image[name] = values.cpu().numpy()
        if explained.per_prototype:
            c, j = next(iter(explained.per_prototype.values())).shape
            per_prototype = pd.DataFrame({"class": torch.arange(c).repeat_interleave(j).numpy(),
                                          "prototype": torch.arange(j).repeat(c).numpy()})
            for name, values in explained.per_prototype.items():
                per_prototype[name] = values.cpu().reshape(-1).numpy()
            tables["per_prototype"] = per_prototype
    return tables


def evaluate(
    method: PrototypeMethod,
    test_dataset: ImageDataset,
    clean: TokenSource,
    noisy: TokenSource | None,
    *,
    batch_size: int,
    device: torch.device,
    map_pool: int,
    noise_seed: int,
    precision: str = "fp32",
    train: TokenSource | None = None,
    train_dataset: ImageDataset | None = None,
    initial: PrototypeMethod | None = None,
    funnybirds: FunnyBirdsData | None = None,
) -> Evaluated:
    """Metrics (percent), the evaluation settings that produced them, and the per-image records.
    ``train`` and ``train_dataset``: the clean training split, for the metrics that read it (purity);
    ``initial``: the method re-initialised as before training, for ``sanity`` (and the FunnyBirds control
    row); ``funnybirds``: a FunnyBirds test split's interventions, for its protocols."""
    pred = predict(method, clean, batch_size=batch_size, device=device, precision=precision, contributions=True,
                   deletion_k=deletion_count(method))  # one pass for the paper's metrics and the extras
    metrics: dict[str, float | None] = {"acc": accuracy(pred.logits, pred.labels)}
    notes: dict[str, str] = {}
    parts = part_truth(test_dataset)
    explained = None
    masks = object_masks(test_dataset, parts)
    extra, extra_notes, extra_details = extra_metrics(
        method, pred, masks, parts, train, train_dataset, batch_size=batch_size, device=device,
        precision=precision, map_pool=map_pool)
    if parts is not None:
        noisy_maps = predict(method, noisy, batch_size=batch_size, device=device, with_logits=False,
                             precision=precision).maps \
            if noisy is not None else None
        explained = explanation_records(
            pred.maps, noisy_maps, pred.labels, parts, method.num_classes,
            map_pool=map_pool, masks=masks,
        )
        metrics.update(explained.scores)
        if noisy is not None:
            notes["sta"] = (f"stability noise drawn from the fixed seed {noise_seed}: every method and seed is "
                            f"scored on the same perturbed images")
        if method.prototypes_per_class == 1:
            notes["dis"] = "undefined for J = 1 (distinctiveness needs at least one pair of prototypes)"
        if explained.scores.get("comp") is None:
            notes["comp"] = "not computed: segmentation masks missing"
    else:
        notes["con, sta, dis, comp"] = f"not defined for {test_dataset.name} (no part annotations)"
    metrics.update(extra)
    notes.update(extra_notes)
    protocols: dict[str, Any] = {}
    protocol_columns: dict[str, Any] = {}
    if funnybirds is not None:  # result.json's "funnybirds" section (docs/protocol/funnybirds.md)
        protocols["funnybirds"], protocol_columns = funnybirds_evaluation(
            method, initial, pred.logits, clean, funnybirds, batch_size=batch_size, device=device, precision=precision)
    checked = None
    if initial is not None:  # Adebayo et al. 2018: the same maps from the re-initialised head
        initial_maps = predict(initial, clean, batch_size=batch_size, device=device, with_logits=False,
                               precision=precision).maps
        checked = sanity(pred.maps, initial_maps)
        metrics["sanity"] = checked.score
        metrics["sanity_signed"] = checked.score_signed
        extra_details["sanity"] = {
            "spearman_mean": _nan_mean(checked.spearman), "spearman_signed_mean": _nan_mean(checked.spearman_signed),
            "ssim_mean": _nan_mean(checked.ssim),
            "randomised": "the head re-initialised as the method builds it (the run's seed); the trunk unchanged"}
        if checked.score is None:
            notes["sanity"] = "undefined: the trained or the re-initialised maps are constant on every image"
        if checked.score_signed is None:
            notes["sanity_signed"] = "undefined: the trained or the re-initialised maps are constant on every image"
    return Evaluated(summary={
        "metrics": metrics,
        "metric_notes": notes,
        "evaluation": {
            "map_grid": list(pred.maps.shape[-2:]),
            "map_pool": map_pool,
            "noise_seed": noise_seed if parts is not None else None,
            "num_images": len(pred.labels),
            **extra_details,
        },
        **protocols,
    }, tables=record_tables(test_dataset, pred.logits, pred.labels, explained, checked, protocol_columns))


def _nan_mean(values: torch.Tensor) -> float | None:
    """The mean of the defined (non-NaN) values, None when there are none (JSON has no NaN)."""
    defined = values[~torch.isnan(values)]
    return float(defined.mean()) if len(defined) else None
