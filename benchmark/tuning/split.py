"""The validation split: a stratified, seeded subset of the training split's rows.

Rule (docs/guides/tuning.md): from each class, ``max(1, round(fraction · n_c))`` of its
``n_c`` training images go to validation (at most ``n_c − 1``: each class keeps a training
image), picked by a NumPy ``Generator`` (PCG64) seeded with ``seed`` drawing a permutation per
class in class order. The rows depend only on the training split's labels, the fraction and the
seed, never on the method, backbone or J: every trial of every method is scored on the same
images. Validation images are rows of the training split's token-cache entry, read by index.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.errors import FieldError, ProtobenchError

DEFAULT_FRACTION = 0.1
DEFAULT_SEED = 0


@dataclass(frozen=True)
class ValidationSplit:
    """Row positions (ascending) of the training split held out for validation, and of the rest."""

    fraction: float
    seed: int
    validation: np.ndarray
    train: np.ndarray

    def fingerprint(self) -> str:
        """Short hash of the rule and the rows it gave (part of a tuning trial's provenance)."""
        blob = json.dumps({"fraction": self.fraction, "seed": self.seed, "rows": self.validation.tolist()})
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def check_rule(fraction: float, seed: int, where: str) -> None:
    """A fraction in (0, 1) and a seed ≥ 0, refused before any compute."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise FieldError(where, "validation_fraction", f"validation_fraction = {fraction!r} must be a number in (0, 1), e.g. 0.1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise FieldError(where, "validation_seed", f"validation_seed = {seed!r} must be an integer ≥ 0")


def validation_split(labels: np.ndarray, *, fraction: float = DEFAULT_FRACTION,
                     seed: int = DEFAULT_SEED) -> ValidationSplit:
    """The stratified split of training ``labels`` (one class label per row)."""
    check_rule(fraction, seed, "validation split")
    labels = np.asarray(labels)
    rng = np.random.Generator(np.random.PCG64(seed))
    held: list[np.ndarray] = []
    for cls in np.unique(labels):
        rows = np.flatnonzero(labels == cls)
        if len(rows) < 2:
            raise ProtobenchError(f"class {int(cls)} has {len(rows)} training image(s); a validation split needs at "
                                  "least 2 per class (one to train on, one to validate)")
        take = min(len(rows) - 1, max(1, round(fraction * len(rows))))
        held.append(rows[rng.permutation(len(rows))[:take]])
    validation = np.sort(np.concatenate(held))
    train = np.setdiff1d(np.arange(len(labels)), validation)
    return ValidationSplit(float(fraction), int(seed), validation, train)


def write_split_file(path: Path, split: ValidationSplit, image_names: list[str], labels: np.ndarray) -> None:
    """``validation_split.json``: the rule, its fingerprint and one entry per validation image (row of
    the training split, image path, label), so a user can read which images were held out (JSON:
    no spreadsheet reads a cell of it as a formula). Rewritten only when its content differs."""
    text = json.dumps({**split_record(split), "images": [
        {"row": int(row), "image": image_names[row], "label": int(labels[row])} for row in split.validation]},
        indent=1) + "\n"
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    temp.replace(path)


def split_record(split: ValidationSplit) -> dict[str, Any]:
    """What a trial's result.json records of its split."""
    return {"fraction": split.fraction, "seed": split.seed, "fingerprint": split.fingerprint(),
            "validation_images": int(len(split.validation)), "train_images": int(len(split.train))}
