"""What a run trains on and is scored on: the training split and the test split, or, for a tuning
trial (``evaluation_split = "validation"``), train-minus-validation and the validation split, both
read by index from the training split's token-cache entry (benchmark/tuning/split.py). A trial
opens neither the test split's images nor its cache entries."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.cache.tokens import TokenSource
from benchmark.data import ImageDataset
from benchmark.progress import Progress
from benchmark.run.funnybirds_eval import FunnyBirdsData, open_funnybirds
from benchmark.tuning.split import ValidationSplit, split_record, validation_split
from benchmark.tuning.subset import RowSubset, augmented_rows, dataset_rows

if TYPE_CHECKING:
    from benchmark.run.prepare import Prepared


@dataclass
class RunData:
    """Training tokens (``clean``: the un-augmented ones when ``train`` holds augmented copies), the
    scored split's tokens (``noisy``: its stability-noise view, None where none is read) and datasets."""

    train: TokenSource
    clean: TokenSource | None
    train_set: ImageDataset
    evaluation: TokenSource
    noisy: TokenSource | None
    evaluation_set: ImageDataset
    split: ValidationSplit | None = None
    tuned: dict[str, Any] | None = None
    funnybirds: FunnyBirdsData | None = None  # a FunnyBirds test split's interventions (its protocols)

    def fingerprints(self) -> dict[str, str]:
        """The dataset fingerprints a result records (the validation split's rule and rows for a trial)."""
        prints = {"train": self.train_set.fingerprint(), self.evaluation_set.split: self.evaluation_set.fingerprint()}
        if self.split is not None:
            prints["validation_split"] = self.split.fingerprint()
        return prints

    def records(self) -> dict[str, Any]:
        """The keys a result adds: ``validation_split`` for a trial, ``tuning`` for a tuned run."""
        out: dict[str, Any] = {"evaluation_split": self.evaluation_set.split}
        if self.split is not None:
            out["validation_split"] = split_record(self.split)
        if self.tuned:
            out["tuning"] = self.tuned
        return out


def run_data(prep: Prepared, cache_root: Path | None, progress: Progress) -> RunData:
    """The run's data, built from ``prep`` (every cache entry opened or built here)."""
    spec = prep.spec
    if spec.evaluation_split == "test":
        train = prep.train_source(cache_root, progress=progress)
        # push reads the un-augmented split (ProtoPNet main.py: train_push_loader over train_cropped)
        clean = prep.train_source(cache_root, progress=progress, augmented=False) if prep.augmented else None
        test, noisy = prep.test_sources(cache_root, progress=progress)
        assert prep.test_set is not None
        return RunData(train, clean, prep.train_set, test, noisy, prep.test_set, tuned=spec.tuned or None,
                       funnybirds=open_funnybirds(prep, cache_root, progress))
    split = validation_split(prep.train_set.labels, fraction=spec.validation_fraction, seed=spec.validation_seed)
    full_clean = prep.train_source(cache_root, progress=progress, augmented=False)
    clean = RowSubset(full_clean, split.train)
    if prep.augmented:
        full = prep.train_source(cache_root, progress=progress)
        train: TokenSource = RowSubset(full, augmented_rows(split.train, len(full) // len(full_clean)))
    else:
        train = clean
    # No stability-noise view: it would be another trunk pass over training images (docs/guides/tuning.md:
    # trials are scored on accuracy and the noise-free metrics).
    return RunData(train, clean if prep.augmented else None, dataset_rows(prep.train_set, split.train, "train"),
                   RowSubset(full_clean, split.validation), None,
                   dataset_rows(prep.train_set, split.validation, "validation"), split=split)



