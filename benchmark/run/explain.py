"""What the figures show, computed from a finished run: for chosen test images, the GT-class
prototype activation maps, and per prediction the prototypes that drove it (contribution to the
logit), their activation maps and their nearest training patch.

The result is plain numpy arrays (``Explanation``) so ``reports.figures`` can draw them without
importing the training code.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmark.data import ImageDataset
from benchmark.cache.tokens import TokenSource
from benchmark.run.reevaluate import load_trained, run_cache_root
from methods.base import PrototypeMethod

DISPLAY_SIZE = 224  # the frame the maps are read in (docs/protocol/metrics.md)


@dataclass
class PrototypeEvidence:
    prototype: int  # index j within its class
    contribution: float  # to the logit of the class it explains
    activation_map: np.ndarray  # H×W on the token grid
    nearest_patch: np.ndarray  # h×w×3 uint8 crop of the training image around the nearest patch
    nearest_source: tuple[int, int, int]  # (training image index, grid row, grid col)


@dataclass
class Explanation:
    image_index: int
    image: np.ndarray  # 224×224×3 uint8, the preprocessed crop before normalisation
    label: int
    predicted: int
    class_names: list[str]
    gt_maps: np.ndarray  # J×H×W maps of the ground-truth class's prototypes
    top_gt: list[int]  # the (up to) top_prototypes GT prototypes with the highest peak activation
    why: list[PrototypeEvidence]  # top prototypes of the predicted class, by contribution


def display_image(dataset: ImageDataset, index: int) -> np.ndarray:
    """The image as the model sees it (box crop for CUB-format data, resized to 224), as uint8."""
    return np.asarray(dataset.load_image(index).convert("RGB").resize((DISPLAY_SIZE, DISPLAY_SIZE), Image.BILINEAR))


def patch_crop(image: np.ndarray, row: int, col: int, grid: tuple[int, int], context: int = 1) -> np.ndarray:
    """The cell (row, col) of the token grid and ``context`` cells around it, cut from ``image``."""
    cell_h, cell_w = image.shape[0] / grid[0], image.shape[1] / grid[1]
    top, left = int(max(0, (row - context) * cell_h)), int(max(0, (col - context) * cell_w))
    bottom = int(min(image.shape[0], (row + context + 1) * cell_h))
    right = int(min(image.shape[1], (col + context + 1) * cell_w))
    return image[top:bottom, left:right].copy()


@torch.no_grad()
def nearest_training_patches(method: PrototypeMethod, train: TokenSource, classes: list[int], *,
                             batch_size: int, device: torch.device) -> dict[int, list[tuple[int, int, int, float]]]:
    """For every prototype of each class in ``classes``: the most activated (image, row, col) over the
    training images of that class (the push rule of docs/protocol/lineage.md, applied for display only)."""
    best: dict[int, list[tuple[int, int, int, float]]] = {}
    labels = train.labels
    for c in classes:
        indices = torch.nonzero(labels == c).flatten()
        top = [(-1, 0, 0, -float("inf"))] * method.prototypes_per_class
        for start in range(0, len(indices), batch_size):
            batch = train.batch(indices[start:start + batch_size], device)
            maps = method.activation_maps(batch, batch.labels).float().cpu()  # B×J×H×W
            peak, where = maps.flatten(2).max(dim=-1)  # B×J
            for j in range(maps.shape[1]):
                b = int(peak[:, j].argmax())
                if float(peak[b, j]) > top[j][3]:
                    r, col = divmod(int(where[b, j]), maps.shape[-1])
                    top[j] = (int(batch.indices[b]), r, col, float(peak[b, j]))
        best[c] = top
    return best


@torch.no_grad()
def explain_run(run_dir: Path, *, images: int, top_prototypes: int = 3, cache_dir: Path | None = None) -> list[Explanation]:
    """Explanations for ``images`` test images spread evenly over the test split, with the
    ``top_prototypes`` ground-truth-class prototypes by peak and predicted-class ones by contribution."""
    prep = load_trained(run_dir)
    method, device, spec = prep.method, prep.device, prep.spec
    cache_root = cache_dir or run_cache_root(run_dir)
    test = prep.test_source(cache_root)  # the figures show clean images: no stability-noise pass
    train = prep.train_source(cache_root, augmented=False)  # push reads the un-augmented set
    chosen = torch.linspace(0, len(test) - 1, steps=min(images, len(test))).round().long().unique()
    batch = test.batch(chosen, device)
    predicted = method.logits(batch).argmax(-1)
    gt_maps = method.activation_maps(batch, batch.labels).float().cpu()
    pred_maps = method.activation_maps(batch, predicted).float().cpu()
    contributions = method.prototype_contributions(batch, predicted).float().cpu()
    nearest = nearest_training_patches(method, train, sorted(set(predicted.tolist())),
                                       batch_size=spec.eval_batch_size, device=device)
    train_images: dict[int, np.ndarray] = {}
    out = []
    for b, index in enumerate(chosen.tolist()):
        c = int(predicted[b])
        order = contributions[b].argsort(descending=True)[:top_prototypes].tolist()
        why = []
        for j in order:
            source, row, col, _ = nearest[c][j]
            if source not in train_images and source >= 0:
                train_images[source] = display_image(prep.train_set, source)
            crop = patch_crop(train_images[source], row, col, prep.trunk.grid) if source >= 0 else np.zeros((1, 1, 3), np.uint8)
            why.append(PrototypeEvidence(j, float(contributions[b, j]), pred_maps[b, j].numpy(), crop, (source, row, col)))
        peaks = gt_maps[b].flatten(1).amax(-1)
        out.append(Explanation(
            image_index=index, image=display_image(prep.test_set, index), label=int(batch.labels[b]), predicted=c,
            class_names=prep.test_set.class_names, gt_maps=gt_maps[b].numpy(),
            top_gt=peaks.argsort(descending=True)[:top_prototypes].tolist(), why=why,
        ))
    return out
