"""What a run amounts to, told without running it or reading its data: images per split (the
official split sizes; synthbirds from its generation arguments), epochs of each stage of its
method (built on a tiny stand-in context), its shape (tokens T, width d, classes C, prototypes
per class J) and the multiply-adds of its trunk and head."""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

from benchmark.backbones import backbone_spec
from benchmark.config import RunSpec
from benchmark.data.declared import DatasetDeclaration, dataset_declaration
from benchmark.data.augment import OPERATIONS, OfflineAugmentedDataset
from benchmark.data.funnybirds import read_funnybirds_set
from benchmark.data.synthbirds import SYNTHBIRDS_DEFAULTS
from benchmark.errors import ProtobenchError
from benchmark.method_lookup import stand_in_method


# Official split sizes (train, test).


def augmentation_factor(augmentation: str) -> int:
    """Training images per original image (offline40: every operation × copies_per_op copies)."""
    if augmentation == "none":
        return 1
    copies = inspect.signature(OfflineAugmentedDataset).parameters["copies_per_op"].default
    return len(OPERATIONS) * copies

def split_images(spec: RunSpec, split: str) -> int:
    """Images of a split, from the official sizes (synthbirds: from its generation arguments)."""
    if spec.dataset == "synthbirds":
        args = {**SYNTHBIRDS_DEFAULTS, **spec.dataset_args}
        per_class = args["images_per_class"]
        train = math.ceil(per_class / 2)  # images 1, 3, 5, … of each class train
        return args["classes"] * (train if split == "train" else per_class - train)
    if spec.dataset == "funnybirds":  # a generated set in its layout: its own size where it is on this machine
        try:
            return len(read_funnybirds_set(spec.data_root, split).labels)
        except ProtobenchError:
            pass
    train, test = _declared(spec.dataset).split_images  # the official sizes
    return train if split == "train" else test

def intervention_images(spec: RunSpec) -> tuple[int, bool]:
    """FunnyBirds' rendered interventions of the test split, each one trunk pass into the token cache:
    exactly as ``dataset_test.json`` lists them where the data is on this machine, else 2^5 part
    interventions per official test image (a lower bound: each image's background objects add theirs);
    with whether the count is exact."""
    try:
        truth = read_funnybirds_set(spec.data_root, "test")
    except ProtobenchError:
        return split_images(spec, "test") * 2**5, False
    return len(truth.labels) * 2 ** len(truth.part_names) + int(truth.background.sum()), True


def stage_epochs(spec: RunSpec) -> list[tuple[str, int]]:
    """(name, epochs) of every stage of the run's method with its hyperparameters."""
    return [(stage.name, stage.epochs) for stage in stand_in_method(spec.method, spec.method_args,
                                                                     spec.prototypes_per_class).stages()]

def run_epochs(spec: RunSpec) -> int:
    """Epochs of every stage of the run's method with its hyperparameters."""
    return sum(epochs for _, epochs in stage_epochs(spec))

# ---- per-epoch costs -------------------------------------------------------------------------
# Widths of the registry's trunks (timm: vit_small embed_dim 384, vit_base 768) and class counts
# of the official datasets, for scaling a measurement to another run's shape.
def _declared(dataset: str) -> DatasetDeclaration:
    found = dataset_declaration(dataset)
    if found is None:
        raise ProtobenchError(f"unknown dataset {dataset!r}: no declaration of its classes and split sizes")
    return found[0]

@dataclass(frozen=True)
class Shape:
    """What a method's per-image cost depends on besides the method: tokens T, width d, C, J."""

    tokens: int
    width: int
    classes: int
    prototypes_per_class: int

    def flops(self) -> float:
        """Multiply-adds per image of one appended pre-norm transformer block (per token: QKV and
        output projections 4·d², MLP of ratio 4 8·d², attention scores and weighted sum 2·T·d)
        plus the prototype similarities (C·J·d per token): the scaling model of ``plan --perf``."""
        return self.block_macs() + self.classes * self.prototypes_per_class * self.tokens * self.width

    def block_macs(self) -> float:
        """Multiply-adds per image of one pre-norm ViT block: T·(12·d² + 2·T·d)."""
        t, d = self.tokens, self.width
        return t * (12 * d * d + 2 * t * d)

    def describe(self) -> str:
        return f"T={self.tokens} d={self.width} C={self.classes} J={self.prototypes_per_class}"

def run_shape(spec: RunSpec) -> Shape:
    backbone = backbone_spec(spec.backbone)
    grid = backbone.grid(spec.image_size)
    width = int(spec.backbone_args.get("embed_dim", backbone.architecture.embed_dim))
    if spec.dataset == "synthbirds":
        classes = int({**SYNTHBIRDS_DEFAULTS, **spec.dataset_args}["classes"])
    else:
        classes = _declared(spec.dataset).classes
    return Shape(grid[0] * grid[1], width, classes, spec.prototypes_per_class)

def trunk_macs(spec: RunSpec) -> float:
    """Forward multiply-adds per image of the run's whole trunk: depth × one block at its shape."""
    depth = int(spec.backbone_args.get("depth", backbone_spec(spec.backbone).architecture.depth))
    return depth * run_shape(spec).block_macs()

def push_count(spec: RunSpec) -> int:
    """Push epochs of the run's method (``push_epochs``; 0 for methods without a push)."""
    return len(getattr(stand_in_method(spec.method, spec.method_args, spec.prototypes_per_class),
                       "push_epochs", ()))
