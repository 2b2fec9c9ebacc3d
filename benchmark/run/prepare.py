"""Everything a run needs before it trains, checked before compute is spent: its data (the
splits, normalised with the trunk's mean and std), its frozen trunk, its method built in context,
its device, and the token sources of its training and evaluation views (``Prepared``). ``run``,
``tune``, ``perf`` and ``reevaluate`` prepare runs here; benchmark/run/runner.py executes them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.backbones import FrozenTrunk, backbone_spec, create_backbone
from benchmark.cache.frozen import with_frozen_features
from benchmark.cache.noise import STABILITY_NOISE_SEED
from benchmark.cache.stage import stage_root
from benchmark.cache.tokens import TokenSource, View, token_source
from benchmark.config import RunSpec
from benchmark.data import (AUGMENTATION_SEED, ImageDataset, OfflineAugmentedDataset, check_images,
                            ensure_synthbirds, load_dataset)
from benchmark.data.funnybirds import check_funnybirds
from benchmark.errors import ProtobenchError
from benchmark.method_lookup import build_method
from benchmark.progress import NO_PROGRESS, Progress
from benchmark.run.provenance import resolve_device
from methods.base import MethodContext, PrototypeMethod

TRUNK_INIT_SEED = 0  # a random trunk (weights = "random") is the same for every run


def dataset_root(spec: RunSpec) -> Path:
    if not spec.data_root:
        raise ProtobenchError(f"no data_root for dataset {spec.dataset!r}: set data_root in the grid "
                              "or pass --data-root")
    return Path(spec.data_root).expanduser()


def load_split(spec: RunSpec, split: str) -> ImageDataset:
    """The split's dataset, normalised with the trunk's mean/std (timm's data config); a missing
    synthbirds root is generated from ``dataset_args``."""
    root = dataset_root(spec)
    if spec.dataset == "synthbirds":
        ensure_synthbirds(root, spec.dataset_args)
    architecture = backbone_spec(spec.backbone).architecture
    return load_dataset(spec.dataset, root, split, image_size=spec.image_size).normalised_with(
        architecture.mean, architecture.std)


def check_data(spec: RunSpec) -> int:
    """Read both splits' annotations and decode every image (a missing synthbirds root is
    generated); the number of classes."""
    train = load_split(spec, "train")
    check_images(train)
    check_images(load_split(spec, "test"))
    if spec.dataset == "funnybirds":  # part maps and interventions decoded, named by path before compute
        check_funnybirds(dataset_root(spec), deep=True)
    return train.num_classes


def check_images_per_class(spec: RunSpec) -> None:
    """A method that clusters each class's training images into its J prototypes (KMEx) needs
    J of them in every class of the training split the run reads (annotations only)."""
    train = load_split(spec, "train")
    counts = np.bincount(train.labels, minlength=train.num_classes)
    fewest = int(counts.argmin())
    if counts[fewest] < spec.prototypes_per_class:
        raise ProtobenchError(
            f"run {spec.label}: {spec.method} clusters each class's training images into J = "
            f"{spec.prototypes_per_class} prototypes, but class {train.class_names[fewest]!r} has "
            f"{counts[fewest]}; use J ≤ {counts[fewest]} or more training images per class")


def cache_build_workers(spec: RunSpec) -> int:
    """DataLoader workers of a cache build: ``num_workers``, or with 0 the CPUs SLURM gave the
    job (``$SLURM_CPUS_PER_TASK``, the cluster profile's ``cpus_per_task``), none elsewhere."""
    if spec.num_workers:
        return spec.num_workers
    given = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(given) if given.isdigit() else 0


def load_trunk(spec: RunSpec) -> FrozenTrunk:
    """The frozen trunk; random weights are drawn from a fixed seed so all runs share caches."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TRUNK_INIT_SEED)
        return create_backbone(spec.backbone, weights=spec.weights, image_size=spec.image_size,
                               **spec.backbone_args)


def method_context(spec: RunSpec, trunk: FrozenTrunk, num_classes: int) -> MethodContext:
    return MethodContext(
        num_classes=num_classes,
        prototypes_per_class=spec.prototypes_per_class,
        embed_dim=trunk.embed_dim,
        grid=trunk.grid,
        num_prefix_tokens=trunk.num_prefix_tokens,
        depth=trunk.depth,
        make_block=trunk.make_appended_block,
        seed=spec.seed,
        has_cls_attention=trunk.has_cls_token,
        backbone=trunk.spec.key,
    )


@dataclass
class Loaded:
    """What a packed tuning worker keeps loaded between the trials of one cell
    (benchmark/tuning/trials.py): the trunk, the training split's annotations and every token
    source opened, keyed by how it was opened (the trials of a cell differ in ``method_args``
    only, so each finds them loaded; each trial still computes its method's frozen features,
    which may depend on its hyperparameters)."""

    trunk: FrozenTrunk | None = None
    train_set: ImageDataset | None = None
    sources: dict[tuple[Any, ...], TokenSource] = field(default_factory=dict)


@dataclass
class Prepared:
    """Everything a run needs before training: built once, before compute is spent."""

    spec: RunSpec
    device: torch.device
    trunk: FrozenTrunk
    train_set: ImageDataset
    test_set: ImageDataset | None  # None for a tuning trial: the test split is never opened
    method: PrototypeMethod
    loaded: Loaded | None = None  # a packed worker's sources, reused across trials

    def initial_method(self) -> PrototypeMethod:
        """The method as the run built it before training (its seed, its hyperparameters, the global
        RNG left as it was): the re-initialised head of the ``sanity`` metric (metrics/sanity.py)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.spec.seed)
            method = build_method(self.spec.method, self.method.ctx, **self.spec.method_args)
        return method.to(self.device).eval()

    def _source(self, dataset: Any, view: View, cache_root: Path | None, progress: Progress, *,
                early: bool) -> TokenSource:
        """Tokens of ``dataset`` through ``view`` (``early``: with the early block's tokens when a
        method of the grid reads them), with the method's frozen per-image features precomputed."""
        spec = self.spec
        early_block = self.method.ctx.early_block_index if early and needs_early_tokens(self.method, spec) else None

        def opened() -> TokenSource:
            return token_source(
                self.trunk, dataset, view=view, cache_dir=cache_root if spec.cache else None,
                backbone_key=spec.backbone, early_block=early_block,
                dtype=spec.cache_dtype, device=self.device, batch_size=self.spec.eval_batch_size,
                num_workers=cache_build_workers(spec), progress=progress,
                stage_dir=stage_root() if spec.cache and spec.cache_stage == "local" else None,
                precision=spec.precision, in_memory=spec.cache_in_memory, reads=self.method.reads,
            )

        if self.loaded is None:
            source = opened()
        else:  # a packed worker: opened (and read into memory) once per cell
            key = (type(dataset).__name__, dataset.split, view, str(cache_root), early_block, self.method.reads)
            if key not in self.loaded.sources:
                self.loaded.sources[key] = opened()
            source = self.loaded.sources[key]
        return with_frozen_features(source, self.method.frozen_features, batch_size=spec.eval_batch_size,
                                    device=self.device)

    def train_source(self, cache_root: Path | None, *, progress: Progress = NO_PROGRESS,
                     augmented: bool = True) -> TokenSource:
        """Training tokens: the clean split, or (``augmented`` and the run asks for it) its
        offline-augmented copies, made from ``AUGMENTATION_SEED`` whatever the run's seed."""
        data: Any = self.train_set
        if augmented and self.augmented:
            data = OfflineAugmentedDataset(self.train_set, seed=AUGMENTATION_SEED)
        return self._source(data, View(), cache_root, progress, early=True)

    @property
    def augmented(self) -> bool:
        """Whether the training epochs read offline-augmented copies of the training split."""
        return self.spec.augmentation == "offline40"

    def test_source(self, cache_root: Path | None, *, progress: Progress = NO_PROGRESS) -> TokenSource:
        """Clean test tokens (early-block tokens are read in training only: SDFA)."""
        return self._source(self.test_set, View(), cache_root, progress, early=False)

    def view_source(self, dataset: Any, cache_root: Path | None, progress: Progress = NO_PROGRESS) -> TokenSource:
        """Clean tokens of another set of evaluation images (FunnyBirds' interventions), cached as the test split's."""
        return self._source(dataset, View(), cache_root, progress, early=False)

    def test_sources(self, cache_root: Path | None, *,
                     progress: Progress = NO_PROGRESS) -> tuple[TokenSource, TokenSource | None]:
        """Clean test tokens, and the stability-noise view of the fixed ``STABILITY_NOISE_SEED``
        (datasets with part annotations only)."""
        clean = self.test_source(cache_root, progress=progress)
        noisy = self._source(self.test_set, View("noise", STABILITY_NOISE_SEED), cache_root, progress, early=False) \
            if self.spec.has_part_annotations else None
        return clean, noisy


def needs_early_tokens(method: PrototypeMethod, spec: RunSpec) -> bool:
    """Whether the training split's cache entry holds the early block's tokens: the method reads
    them, or another run of the grid on the same trunk and data does (``cache_early_tokens``)."""
    return method.needs_early_tokens or spec.cache_early_tokens


def check_deterministic(spec: RunSpec, method: PrototypeMethod, device: torch.device) -> None:
    """``deterministic = true`` on CUDA is refused before compute for a method using an op
    without a deterministic CUDA kernel (torch would raise mid-training)."""
    if spec.deterministic and device.type == "cuda" and method.cuda_ops_without_deterministic_kernel:
        raise ProtobenchError(
            f"run {spec.label}: deterministic = true cannot hold on CUDA for {spec.method!r}: "
            f"{', '.join(method.cuda_ops_without_deterministic_kernel)} has no deterministic kernel; "
            "set deterministic = false (docs/guides/gpu.md)")


def check_device(spec: RunSpec) -> torch.device:
    """The device ``spec`` runs on here; a CUDA device on a machine without CUDA is a ProtobenchError."""
    device = resolve_device(spec.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ProtobenchError(f"device {spec.device!r} was asked for but CUDA is not available on this machine; "
                              "use device = 'auto' (or --device cpu)")
    return device


def prepare(spec: RunSpec, *, trunk: FrozenTrunk | None = None, loaded: Loaded | None = None) -> Prepared:
    """Load data annotations, trunk and method: every user error surfaces here. ``trunk``: an
    already loaded trunk of the same backbone, weights and image size (``perf`` shares one);
    ``loaded``: a packed tuning worker's trunk, training split and sources of this cell (filled
    by the first trial)."""
    device = check_device(spec)
    if loaded is not None:
        trunk = trunk or loaded.trunk
        if loaded.train_set is None:
            loaded.train_set = load_split(spec, "train")
    train_set = loaded.train_set if loaded is not None else load_split(spec, "train")
    test_set = load_split(spec, "test") if spec.evaluation_split == "test" else None
    trunk = (load_trunk(spec) if trunk is None else trunk).to(device)
    if loaded is not None:
        loaded.trunk = trunk
    torch.manual_seed(spec.seed)
    method = build_method(spec.method, method_context(spec, trunk, train_set.num_classes), **spec.method_args)
    if "attention" in method.reads and not trunk.has_cls_token:
        raise ProtobenchError(f"run {spec.label}: {spec.method} reads the CLS attention, which {spec.backbone} "
                              "does not have (no CLS token); pick a trunk with one, or leave \"attention\" out of the "
                              "method's `reads` if it does not use it")
    check_deterministic(spec, method, device)
    return Prepared(spec, device, trunk, train_set, test_set, method, loaded)
