"""Offline augmentation: deterministic per (seed, index), right shapes, really augmented."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from PIL import Image

from benchmark.data import OfflineAugmentedDataset, generate_synthbirds, load_dataset
from benchmark.data.augment import OPERATIONS, augment_image
from benchmark.errors import ProtobenchError


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory):
    root = generate_synthbirds(tmp_path_factory.mktemp("aug") / "sb", classes=2, images_per_class=4, seed=5)
    return load_dataset("synthbirds", root, "train", image_size=32)


def test_length_labels_and_shapes(train) -> None:
    aug = OfflineAugmentedDataset(train, copies_per_op=2, seed=0)
    assert len(aug) == len(train) * 4 * 2 == 32
    assert aug.num_classes == train.num_classes and aug.class_names == train.class_names
    assert aug.labels.tolist() == np.repeat(train.labels, 8).tolist()
    image, label, index = aug[13]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert (label, index) == (int(train.labels[13 // 8]), 13)
    assert aug.load_image(13).size == train.load_image(1).size  # augmented at the cropped size
    with pytest.raises(IndexError):
        aug[32]


def test_default_recipe_is_ten_copies_per_operation(train) -> None:
    assert OPERATIONS == ("rotate", "skew", "shear", "flip")
    assert len(OfflineAugmentedDataset(train)) == len(train) * 40


def test_items_depend_only_on_seed_and_index(train) -> None:
    a = OfflineAugmentedDataset(train, copies_per_op=2, seed=3)
    b = OfflineAugmentedDataset(train, copies_per_op=2, seed=3)
    order = [1, 0, 20, 1, 12]  # rotate, rotate, shear, shear (flip copies do not depend on the seed)
    first = {i: a[i][0] for i in order}
    for i in reversed(order):
        assert torch.equal(b[i][0], first[i])
    c = OfflineAugmentedDataset(train, copies_per_op=2, seed=4)
    assert sum(not torch.equal(c[i][0], first[i]) for i in set(order)) >= 3


def test_copies_differ_from_the_original_and_from_each_other(train) -> None:
    aug = OfflineAugmentedDataset(train, copies_per_op=2, seed=0)
    original = train[0][0]
    copies = [aug[i][0] for i in range(6)]  # 2 × rotate, skew, shear of image 0
    for k, copy in enumerate(copies):
        assert not torch.allclose(copy, original, atol=1e-3), OPERATIONS[k // 2]
    assert len({c.numpy().tobytes() for c in copies}) == 6


@pytest.mark.parametrize("operation", OPERATIONS)
def test_operations_keep_size_and_leave_no_empty_border(operation: str) -> None:
    white = Image.new("RGB", (37, 23), (255, 255, 255))
    for s in range(40):
        out = augment_image(white, operation, np.random.default_rng(s))
        assert out.size == (37, 23) and np.asarray(out).min() == 255


def test_flip_happens_about_half_the_time() -> None:
    """A left/right ramp is mirrored iff its left edge turns bright."""
    ramp = Image.fromarray(np.tile(np.linspace(0, 255, 64).astype(np.uint8), (48, 1)))
    flips = [np.asarray(augment_image(ramp, "rotate", np.random.default_rng(s)))[24, 8] > 128 for s in range(100)]
    assert 30 <= sum(flips) <= 70


def test_fingerprint_includes_the_recipe(train) -> None:
    fp = OfflineAugmentedDataset(train, copies_per_op=2, seed=0).fingerprint()
    assert len(fp) == 16 and fp != train.fingerprint()
    assert fp == OfflineAugmentedDataset(train, copies_per_op=2, seed=0).fingerprint()
    assert fp != OfflineAugmentedDataset(train, copies_per_op=2, seed=1).fingerprint()
    assert fp != OfflineAugmentedDataset(train, copies_per_op=3, seed=0).fingerprint()


def test_bad_arguments_are_user_errors(train) -> None:
    with pytest.raises(ProtobenchError, match="copies_per_op"):
        OfflineAugmentedDataset(train, copies_per_op=0)
    with pytest.raises(ProtobenchError, match="seed"):
        OfflineAugmentedDataset(train, seed=-1)
    with pytest.raises(ProtobenchError, match="Unknown augmentation 'zoom'"):
        augment_image(Image.new("RGB", (4, 4)), "zoom", np.random.default_rng(0))
