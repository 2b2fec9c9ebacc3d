"""Spatial misalignment of one batch of test images (Sacha et al., AAAI 2024; metrics/misalignment.py
for the definitions): the top-k prototypes of the ground-truth class (by their map's maximum), the
attack mask outside their high-activation boxes, masked PGD (benchmark/robustness/attack.py)
decreasing their mean maximum activation through the live trunk, then PAC, PRC, PLC and the
predictions before and after.

A reference row (no prototypes: its J maps are copies of one class map) gets accuracy under attack
only: PGD on the whole image increasing the cross-entropy of the true class (Madry et al. 2018).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from benchmark.robustness.attack import masked_pgd
from benchmark.robustness.live import LiveMethod
from benchmark.robustness.options import RobustnessOptions
from metrics.misalignment import attack_masks, misalignment_scores

MISALIGNMENT_COLUMNS = ("correct_clean", "correct_attacked", "pac", "prc", "plc")


def misalignment_batch(live: LiveMethod, pixels: Tensor, labels: Tensor, options: RobustnessOptions, *,
                       prototypes: bool, generator: torch.Generator, log_density: bool = False) -> dict[str, np.ndarray]:
    """Per image of the batch: ``correct_clean``, ``correct_attacked`` (1.0 / 0.0) and, with
    ``prototypes``, ``pac``, ``prc``, ``plc`` (NaN without; ``log_density``: PAC of ``exp(map)``)."""
    method = live.method
    size = pixels.shape[-1]
    with torch.no_grad(), live.compute():
        clean = live.tokens(pixels, labels)
        logits_clean = method.logits(clean).float()
        if prototypes:
            own_maps = method.activation_maps(clean, labels).float()
            every_before = live.every_map(clean)
    if prototypes:
        k = min(options.top_k, method.prototypes_per_class)
        chosen = own_maps.flatten(2).amax(dim=2).topk(k, dim=1).indices  # (B, k) among the J
        mask = attack_masks(own_maps, chosen, size, percentile=options.percentile).to(pixels.device)

        def objective(x: Tensor) -> Tensor:  # PPNetAdversarialWrapper: mean max activation of the attacked
            with live.compute():
                maps = method.activation_maps(live.tokens(x, labels), labels).float()
            return maps.flatten(2).amax(dim=2).gather(1, chosen).mean(dim=1)
    else:
        mask = torch.ones_like(pixels[:, :1])

        def objective(x: Tensor) -> Tensor:  # untargeted: decrease −CE, i.e. increase the true class's loss
            with live.compute():
                logits = method.logits(live.tokens(x, labels)).float()
            return -F.cross_entropy(logits, labels, reduction="none")

    attacked = masked_pgd(objective, pixels, mask, epsilon=options.epsilon, step=options.step, steps=options.steps,
                          generator=generator)
    with torch.no_grad(), live.compute():
        after = live.tokens(attacked, labels)
        logits_after = method.logits(after).float()
        every_after = live.every_map(after) if prototypes else None
    rows = {"correct_clean": (logits_clean.argmax(dim=1) == labels).double().cpu().numpy(),
            "correct_attacked": (logits_after.argmax(dim=1) == labels).double().cpu().numpy()}
    if prototypes:
        J = method.prototypes_per_class
        own = torch.arange(method.num_classes * J, device=labels.device)[None, :] // J == labels[:, None]
        scores = misalignment_scores(every_before, every_after, labels[:, None] * J + chosen, own, size,
                                     log_density=log_density)
        rows.update({name: value.cpu().numpy() for name, value in scores.items()})
    else:
        rows.update({name: np.full(len(labels), np.nan) for name in ("pac", "prc", "plc")})
    return rows
