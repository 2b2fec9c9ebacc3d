"""Stanford Dogs and Stanford Cars readers on tiny trees written in the official .mat formats."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
from PIL import Image

from benchmark.data import load_dataset
from benchmark.errors import ProtobenchError

DOG_CLASSES = ["n02085620-Chihuahua", "n02085782-Japanese_spaniel", "n02085936-Maltese_dog"]


def _cell(strings: list[str], shape: tuple[int, int]) -> np.ndarray:
    """A MATLAB cell array of strings, as ``savemat`` writes and ``loadmat`` reads it."""
    cell = np.empty(len(strings), dtype=object)
    for k, s in enumerate(strings):
        cell[k] = np.array([s])
    return cell.reshape(shape)


def _image(path: Path, size: tuple[int, int], colour: tuple[int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)


def _write_dogs(root: Path, lists_dir: str = "lists") -> Path:
    """Images/<wnid-breed>/…, and {train,test}_list.mat (N×1 cells + N×1 double labels)."""
    splits = {"train": [(0, 1), (1, 2), (2, 3)], "test": [(0, 4), (2, 5)]}
    (root / lists_dir).mkdir(parents=True, exist_ok=True)
    for split, items in splits.items():
        files = [f"{DOG_CLASSES[c]}/{DOG_CLASSES[c].split('-')[0]}_{n}.jpg" for c, n in items]
        for (c, _), rel in zip(items, files):
            _image(root / "Images" / rel, (30 + 5 * c, 20), (40 * c, 100, 200))
        scipy.io.savemat(root / lists_dir / f"{split}_list.mat", {
            "file_list": _cell(files, (len(files), 1)),
            "annotation_list": _cell([f[:-4] for f in files], (len(files), 1)),
            "labels": np.array([[c + 1.0] for c, _ in items]),
        })
    return root


def _write_cars(root: Path, test_annos_in_root: bool = True) -> Path:
    """devkit/cars_meta.mat, devkit/cars_train_annos.mat, cars_test_annos_withlabels.mat, images."""
    names = ["AM General Hummer SUV 2000", "Acura RL Sedan 2012"]
    (root / "devkit").mkdir(parents=True)
    scipy.io.savemat(root / "devkit" / "cars_meta.mat", {"class_names": _cell(names, (1, len(names)))})
    fields = ["bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname"]
    for split, classes in (("train", [2, 1, 2]), ("test", [1, 2])):
        annos = np.zeros((1, len(classes)), dtype=[(f, object) for f in fields])
        for k, c in enumerate(classes):
            fname = f"{k + 1:05d}.jpg"
            annos[0, k] = (np.array([[1]], np.uint8), np.array([[2]], np.uint8), np.array([[20]], np.uint8),
                           np.array([[15]], np.uint8), np.array([[c]], np.uint8), np.array([fname]))
            _image(root / f"cars_{split}" / fname, (24, 16), (200, 30 * k, 10 * c))
        target = root / "devkit" / "cars_train_annos.mat" if split == "train" else (
            (root if test_annos_in_root else root / "devkit") / "cars_test_annos_withlabels.mat")
        scipy.io.savemat(target, {"annotations": annos})
    return root


@pytest.mark.parametrize("lists_dir", ["lists", "."])
def test_dogs_reader(tmp_path: Path, lists_dir: str) -> None:
    root = _write_dogs(tmp_path / "dogs", lists_dir)
    train = load_dataset("dogs", root, "train", image_size=32)
    test = load_dataset("dogs", root, "test", image_size=32)
    assert train.class_names == DOG_CLASSES and train.num_classes == 3
    assert train.labels.tolist() == [0, 1, 2] and test.labels.tolist() == [0, 2]
    assert train.labels.dtype == np.int64
    assert test.image_paths[1] == root / "Images" / DOG_CLASSES[2] / "n02085936_5.jpg"
    assert train.annotations is None
    assert train.load_image(2).size == (40, 20)  # the full image, no crop
    image, label, index = test[1]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32 and (label, index) == (2, 1)
    assert train.fingerprint() == load_dataset("dogs", root, "train").fingerprint() != test.fingerprint()


def test_dogs_reader_errors(tmp_path: Path) -> None:
    root = _write_dogs(tmp_path / "dogs")
    (root / "Images" / DOG_CLASSES[1] / "n02085782_2.jpg").unlink()
    with pytest.raises(ProtobenchError, match="n02085782_2.jpg"):
        load_dataset("dogs", root, "train")
    scipy.io.savemat(root / "lists" / "test_list.mat", {"file_list": _cell(["a/b.jpg"], (1, 1))})
    with pytest.raises(ProtobenchError, match="test_list.mat has no variable 'labels'"):
        load_dataset("dogs", root, "test")
    scipy.io.savemat(root / "lists" / "test_list.mat", {
        "file_list": _cell([f"{DOG_CLASSES[0]}/x.jpg"], (1, 1)), "labels": np.array([[2.0]])})
    with pytest.raises(ProtobenchError, match="labelled class 2 but class 2 is folder n02085782-Japanese_spaniel"):
        load_dataset("dogs", root, "test")
    (root / "lists" / "test_list.mat").write_bytes(b"not a mat file")
    with pytest.raises(ProtobenchError, match="test_list.mat is not a readable MATLAB"):
        load_dataset("dogs", root, "test")
    (root / "lists" / "test_list.mat").unlink()
    with pytest.raises(ProtobenchError, match="test_list.mat not found"):
        load_dataset("dogs", root, "test")


@pytest.mark.parametrize("test_annos_in_root", [True, False])
def test_cars_reader(tmp_path: Path, test_annos_in_root: bool) -> None:
    root = _write_cars(tmp_path / "cars", test_annos_in_root)
    train = load_dataset("cars", root, "train", image_size=16)
    test = load_dataset("cars", root, "test", image_size=16)
    assert train.class_names == ["AM General Hummer SUV 2000", "Acura RL Sedan 2012"]
    assert train.labels.tolist() == [1, 0, 1] and test.labels.tolist() == [0, 1]
    assert train.image_paths[2] == root / "cars_train" / "00003.jpg"
    assert test.annotations is None and test.load_image(0).size == (24, 16)  # full image
    image, label, index = train[2]
    assert image.shape == (3, 16, 16) and (label, index) == (1, 2)


def test_cars_reader_accepts_torchvision_layout(tmp_path: Path) -> None:
    _write_cars(tmp_path / "stanford_cars")
    assert len(load_dataset("cars", tmp_path, "test")) == 2


def test_cars_reader_errors(tmp_path: Path) -> None:
    root = _write_cars(tmp_path / "cars")
    (root / "cars_test_annos_withlabels.mat").unlink()
    with pytest.raises(ProtobenchError, match="cars_test_annos_withlabels.mat not found"):
        load_dataset("cars", root, "test")
    annos = np.zeros((1, 1), dtype=[("fname", object)])
    annos[0, 0] = (np.array(["00001.jpg"]),)
    scipy.io.savemat(root / "devkit" / "cars_train_annos.mat", {"annotations": annos})
    with pytest.raises(ProtobenchError, match="has no field 'class'"):
        load_dataset("cars", root, "train")
    (root / "cars_train").rename(root / "elsewhere")
    with pytest.raises(ProtobenchError, match="cars_train is missing"):
        load_dataset("cars", root, "train")
