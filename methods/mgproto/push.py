"""MGProto's push (projection) with the unique-image constraint (official push.py
``push_prototypes``): each prototype is replaced by its best latent patch in a training image of
its own class that no earlier prototype was projected from."""
from __future__ import annotations

import math

import torch
from torch import Tensor


def unique_image_choice(scores: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """C×J index of the source image of every prototype, −1 where none is left.

    ``scores`` is n×J: for every training image, the best activation over its grid of each of
    the J prototypes of its own class (``labels``, n). As push.py, prototypes are visited in
    order (j = 0, 1, … within a class); each takes the image of its class with the highest score
    that no earlier prototype took (``has_pushed_img``). Ties go to the lowest image index (the
    official ``np.argsort`` leaves them unspecified). Classes are independent (an image belongs
    to one class), so all classes are handled at once.
    """
    n, prototypes = scores.shape
    device = scores.device
    counts = torch.bincount(labels, minlength=num_classes)
    order = torch.argsort(labels, stable=True)  # class-major, ascending image index within a class
    sorted_labels = labels[order]
    rank = torch.arange(n, device=device) - (counts.cumsum(0) - counts)[sorted_labels]
    width = max(int(counts.max()), 1)
    images = torch.full((num_classes, width), -1, dtype=torch.long, device=device)
    images[sorted_labels, rank] = order
    table = scores.new_full((num_classes, width, prototypes), -math.inf)
    table[sorted_labels, rank] = scores[order]
    taken = images < 0
    choice = torch.full((num_classes, prototypes), -1, dtype=torch.long, device=device)
    rows = torch.arange(num_classes, device=device)
    for j in range(prototypes):
        candidates = table[:, :, j].masked_fill(taken, -math.inf)
        best = candidates.argmax(dim=1)  # first maximum: the lowest image index
        found = candidates[rows, best] > -math.inf
        choice[:, j] = torch.where(found, images[rows, best], -1)
        taken[rows[found], best[found]] = True
    return choice
