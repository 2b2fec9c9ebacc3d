"""The metrics beyond the paper (docs/protocol/metrics.md, "Metrics beyond the paper"): ``purity``, ``loc``,
``size_local``, ``size_global`` and ``del``, each computed where its inputs exist.

``size_*`` and ``del`` read ``prototype_contributions`` and ``logits_without``, computed in the
evaluation's one pass over the clean test tokens (:func:`benchmark.run.prediction.predict`);
``loc`` the test maps and segmentation masks; ``purity`` the
own-class maps of the clean (un-augmented) training split and its part annotations.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from benchmark.cache.tokens import TokenSource
from benchmark.data import ImageDataset
from benchmark.run.ground_truth import part_truth
from benchmark.run.prediction import Predictions, predict
from methods.base import PrototypeMethod
from metrics.deletion import DELETION_K, DELETION_SEED, deletion
from metrics.localisation import localisation
from metrics.purity import PURITY_TOPK, purity
from metrics.size import LOCAL_SIZE_TAU, size_global, size_local

EXTRA_METRIC_KEYS = ("purity", "loc", "size_local", "size_global", "del")


def deletion_count(method: PrototypeMethod) -> int | None:
    """How many prototypes deletion switches off (``DELETION_K``), None when J ≤ k (the top k and
    k random prototypes would be the same)."""
    return DELETION_K if method.prototypes_per_class > DELETION_K else None


def extra_metrics(
    method: PrototypeMethod,
    test: Predictions,
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
    by-products (logit drops) that go to ``result.json``'s ``evaluation``. ``test``: the test
    split's predictions with their :class:`Contributions` (``predict(..., contributions=True,
    deletion_k=deletion_count(method))``)."""
    J = method.prototypes_per_class
    deletion_k = deletion_count(method)
    passed = test.contributions
    if passed is None:
        raise ValueError("extra_metrics: the test predictions carry no contributions; predict with contributions=True")
    values: dict[str, float | None] = {key: None for key in EXTRA_METRIC_KEYS}
    notes: dict[str, str] = {}
    values["size_local"] = size_local(passed.predicted)
    values["size_global"] = float(size_global(passed.truth, test.labels, method.num_classes))
    details: dict[str, Any] = {"size_local_tau": LOCAL_SIZE_TAU}
    if passed.logits_top is not None and passed.logits_random is not None:
        dropped = deletion(test.logits, passed.logits_top, passed.logits_random, test.labels)
        values["del"] = dropped.pop("del")
        details["deletion"] = {"k": deletion_k, "seed": DELETION_SEED, **dropped}
    else:
        notes["del"] = f"undefined for J = {J}: switching off the top {DELETION_K} or random prototypes is the same"
    if masks is not None:
        values["loc"] = localisation(test.maps, masks, map_pool=map_pool)
    else:
        notes["loc"] = "not computed: segmentation masks missing"
    parts = None if train_dataset is None else part_truth(train_dataset)
    if train is not None and parts is not None:
        maps = predict(method, train, batch_size=batch_size, device=device, with_logits=False,
                       precision=precision).maps
        values["purity"] = purity(maps, train.labels, parts, method.num_classes, map_pool=map_pool)
        details["purity_topk"] = PURITY_TOPK
    else:
        notes["purity"] = "not computed: the training split has no part annotations"
    return values, notes, details
