"""The metrics beyond the paper (README, "Metrics beyond the paper"): ``purity``, ``loc``,
``size_local``, ``size_global`` and ``del``, each computed where its inputs exist.

``size_*`` and ``del`` read ``prototype_contributions`` and ``logits_without`` in one pass over
the clean test tokens; ``loc`` the test maps and segmentation masks; ``purity`` the
own-class maps of the clean (un-augmented) training split and its part annotations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from benchmark.cache.tokens import TokenSource
from benchmark.data import ImageDataset
from benchmark.run.prediction import block_output_reused, predict
from methods.base import PrototypeMethod
from methods.common.precision import autocast
from metrics import map_parts_to_frame
from metrics.deletion import DELETION_K, DELETION_SEED, deletion, deletion_masks
from metrics.localisation import localisation
from metrics.purity import PURITY_TOPK, purity
from metrics.size import LOCAL_SIZE_TAU, size_global, size_local

EXTRA_METRIC_KEYS = ("purity", "loc", "size_local", "size_global", "del")


@dataclass
class ContributionPass:
    """Per test image: logits, the contributions of its ground-truth and predicted class's
    prototypes, and the logits with the top-k / k random ground-truth prototypes switched off."""

    logits: Tensor  # N×C
    labels: Tensor  # N
    truth: Tensor  # N×J
    predicted: Tensor  # N×J
    logits_top: Tensor | None  # N×C, None without deletion (J = 1)
    logits_random: Tensor | None


@torch.no_grad()
def contribution_pass(method: PrototypeMethod, source: TokenSource, *, batch_size: int, device: torch.device,
                      precision: str, deletion_k: int | None) -> ContributionPass:
    """One pass over ``source`` (``deletion_k`` None: no deletion). The random prototypes come
    from ``DELETION_SEED`` in image order, so every method and seed switches off the same ones."""
    method.eval()
    generator = torch.Generator().manual_seed(DELETION_SEED)
    rows: dict[str, list[Tensor]] = {"logits": [], "truth": [], "predicted": [], "top": [], "random": []}
    order = torch.arange(len(source))
    for start in range(0, len(order), batch_size):
        batch = source.batch(order[start:start + batch_size], device, reads=method.reads)
        with block_output_reused(method), autocast(precision, device):
            logits = method.logits(batch)
            truth = method.prototype_contributions(batch, batch.labels)
            rows["predicted"].append(method.prototype_contributions(batch, logits.argmax(dim=1)).float().cpu())
            if deletion_k is not None:
                top, drawn = deletion_masks(truth.float(), deletion_k, generator)
                rows["top"].append(method.logits_without(batch, batch.labels, top).float().cpu())
                rows["random"].append(method.logits_without(batch, batch.labels, drawn).float().cpu())
        rows["logits"].append(logits.float().cpu())
        rows["truth"].append(truth.float().cpu())
    joined = {name: torch.cat(values) if values else None for name, values in rows.items()}
    return ContributionPass(logits=joined["logits"], labels=source.labels.clone(), truth=joined["truth"],
                            predicted=joined["predicted"], logits_top=joined["top"], logits_random=joined["random"])


def extra_metrics(
    method: PrototypeMethod,
    test: TokenSource,
    test_maps: Tensor,
    masks: Tensor | None,
    train: TokenSource | None,
    train_dataset: ImageDataset | None,
    *,
    batch_size: int,
    device: torch.device,
    precision: str,
    map_pool: int,
) -> tuple[dict[str, float | None], dict[str, str], dict[str, Any]]:
    """The five metrics (None where undefined), notes on those left out, and the settings and
    by-products (logit drops) that go to ``result.json``'s ``evaluation``."""
    J = method.prototypes_per_class
    deletion_k = DELETION_K if J > DELETION_K else None
    passed = contribution_pass(method, test, batch_size=batch_size, device=device, precision=precision,
                               deletion_k=deletion_k)
    values: dict[str, float | None] = {key: None for key in EXTRA_METRIC_KEYS}
    notes: dict[str, str] = {}
    values["size_local"] = size_local(passed.predicted)
    values["size_global"] = float(size_global(passed.truth, passed.labels, method.num_classes))
    details: dict[str, Any] = {"size_local_tau": LOCAL_SIZE_TAU}
    if passed.logits_top is not None and passed.logits_random is not None:
        dropped = deletion(passed.logits, passed.logits_top, passed.logits_random, passed.labels)
        values["del"] = dropped.pop("del")
        details["deletion"] = {"k": deletion_k, "seed": DELETION_SEED, **dropped}
    else:
        notes["del"] = f"undefined for J = {J}: switching off the top {DELETION_K} or random prototypes is the same"
    if masks is not None:
        values["loc"] = localisation(test_maps, masks, map_pool=map_pool)
    else:
        notes["loc"] = "not computed: segmentation masks missing"
    annotations = None if train_dataset is None else train_dataset.annotations
    if train is not None and annotations is not None:
        maps = predict(method, train, batch_size=batch_size, device=device, with_logits=False,
                       precision=precision).maps
        parts = map_parts_to_frame(annotations.part_xy, annotations.boxes, annotations.part_visible)
        values["purity"] = purity(maps, train.labels, parts, method.num_classes, map_pool=map_pool)
        details["purity_topk"] = PURITY_TOPK
    else:
        notes["purity"] = "not computed: the training split has no part annotations"
    return values, notes, details
