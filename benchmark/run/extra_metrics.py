"""The metrics beyond the paper (docs/protocol/metrics.md, "Metrics beyond the paper"): ``purity``, ``loc``,
``size_local``, ``size_global``, ``del`` and the QPM line's ``class_indep``, ``contrastive``, ``sid5``
with PF-CBM's ``pointing``, each computed where its inputs exist.

``size_*`` and ``del`` read ``prototype_contributions`` and ``logits_without``, computed in the
evaluation's one pass over the clean test tokens (:func:`benchmark.run.prediction.predict`);
``loc`` the test maps and segmentation masks; ``purity`` the
own-class maps of the clean (un-augmented) training split and its part annotations; ``pointing``
those maps (each prototype's part) and the test maps with the test keypoints; ``class_indep`` and
``contrastive`` the methods' ``global_features`` of the clean training split; ``sid5`` the
predicted class's maps and contributions of the test pass.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from benchmark.cache.tokens import TokenSource
from benchmark.data import ImageDataset
from benchmark.run.ground_truth import part_truth
from benchmark.run.prediction import Predictions, global_features, predict
from methods.base import PrototypeMethod
from metrics import PartGroundTruth, PartTruth
from metrics.deletion import DELETION_K, DELETION_SEED, deletion
from metrics.global_interpretability import GMM_SEED, SID_K, class_independence, contrastiveness, sid_k
from metrics.localisation import localisation
from metrics.pointing import POINTING_RADIUS, pointing
from metrics.purity import PURITY_TOPK, purity
from metrics.size import LOCAL_SIZE_TAU, size_global, size_local

EXTRA_METRIC_KEYS = ("purity", "loc", "size_local", "size_global", "del", "class_indep", "contrastive", "sid5",
                     "pointing")


def deletion_count(method: PrototypeMethod) -> int | None:
    """How many prototypes deletion switches off (``DELETION_K``), None when J ≤ k (the top k and
    k random prototypes would be the same)."""
    return DELETION_K if method.prototypes_per_class > DELETION_K else None


def extra_metrics(
    method: PrototypeMethod,
    test: Predictions,
    masks: Tensor | None,
    test_parts: PartTruth | None,
    train: TokenSource | None,
    train_dataset: ImageDataset | None,
    *,
    batch_size: int,
    device: torch.device,
    precision: str,
    map_pool: int,
) -> tuple[dict[str, float | None], dict[str, str], dict[str, Any]]:
    """The metrics (None where undefined), notes on those left out, and the settings and
    by-products (logit drops) that go to ``result.json``'s ``evaluation``. ``test``: the test
    split's predictions with their :class:`Contributions` (``predict(..., contributions=True,
    deletion_k=deletion_count(method))``); ``test_parts``: the test split's part ground truth."""
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
    sid, k = sid_k(passed.predicted_maps, passed.predicted, SID_K)
    values["sid5"] = sid
    details["sid"] = {"k": k, "maps": "the predicted class's, its k largest contributions"}
    if k < SID_K:
        notes["sid5"] = f"SID@{k}: J = {J} < {SID_K}, the official code's fallback to SID@J"
    parts = None if train_dataset is None else part_truth(train_dataset)
    maps = None
    if train is not None and parts is not None:
        maps = predict(method, train, batch_size=batch_size, device=device, with_logits=False,
                       precision=precision).maps
        values["purity"] = purity(maps, train.labels, parts, method.num_classes, map_pool=map_pool)
        details["purity_topk"] = PURITY_TOPK
    else:
        notes["purity"] = "not computed: the training split has no part annotations"
    if maps is not None and isinstance(parts, PartGroundTruth) and isinstance(test_parts, PartGroundTruth):
        values["pointing"] = pointing(test.maps, test_parts, test.labels, maps, parts, train.labels,
                                      method.num_classes, map_pool=map_pool)
        details["pointing_radius_px"] = POINTING_RADIUS
    else:
        notes["pointing"] = "not computed: the training and test splits need part keypoints"
    if train is not None:
        features = global_features(method, train, batch_size=batch_size, device=device, precision=precision)
        values["class_indep"] = class_independence(features, train.labels, method.num_classes)
        values["contrastive"] = contrastiveness(features)
        details["global_features"] = {"count": int(features.shape[1]), "gmm_seed": GMM_SEED}
    else:
        notes["class_indep, contrastive"] = "not computed: no training split to read the features on"
    return values, notes, details
