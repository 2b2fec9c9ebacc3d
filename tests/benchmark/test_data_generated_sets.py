"""`make-data nabirds` and `make-data partimagenet`: every file of the official layouts, written
deterministically and atomically; the NABirds hierarchy and keypoints, and PartImageNet polygons
that cover exactly the pixels of their annotation's area."""
from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.data import generate_nabirds, generate_partimagenet, load_dataset
from benchmark.data.nabirds import ANNOTATION_FILES
from benchmark.errors import ProtobenchError
from benchmark.run.ground_truth import part_truth
from metrics import polygons_to_frame


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def nabirds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_nabirds(tmp_path_factory.mktemp("nb") / "nabirds", classes=3, images_per_class=4, seed=1,
                            image_size=64)


@pytest.fixture(scope="module")
def partimagenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_partimagenet(tmp_path_factory.mktemp("pin") / "PartImageNet", classes=2, images_per_class=4,
                                 seed=1, image_size=64)


def test_nabirds_writes_every_official_file_with_uuid_ids_and_a_hierarchy(nabirds: Path) -> None:
    for rel in ANNOTATION_FILES:
        assert (nabirds / rel).is_file(), rel
    lines = (nabirds / "images.txt").read_text().splitlines()
    assert len(lines) == 12
    for line in lines:
        image_id, rel = line.split()
        assert uuid.UUID(image_id).version == 4 and rel == f"{rel[:4]}/{uuid.UUID(image_id).hex}.jpg"
        assert (nabirds / "images" / rel).is_file()
    assert (nabirds / "classes.txt").read_text().splitlines() == [
        "0 Birds", "1 Synthbird family 1", "2 Synthbird family 2",
        "100 Synthbird_a", "101 Synthbird_b", "102 Synthbird_c"]
    assert (nabirds / "hierarchy.txt").read_text().splitlines() == ["1 0", "2 0", "100 1", "101 1", "102 2"]
    assert (nabirds / "parts" / "parts.txt").read_text().splitlines()[::5] == ["0 bill", "5 belly", "10 right wing"]
    assert all(re.fullmatch(r"\S+ \d+ \d+ \d+ \d+", line)
               for line in (nabirds / "bounding_boxes.txt").read_text().splitlines())  # integers, as NABirds


def test_nabirds_reads_back_with_visible_keypoints_inside_their_boxes(nabirds: Path) -> None:
    train, test = load_dataset("nabirds", nabirds, "train"), load_dataset("nabirds", nabirds, "test")
    assert (len(train), len(test), train.num_classes) == (6, 6, 3)
    assert train.labels.tolist() == [0, 0, 1, 1, 2, 2]
    ann = test.annotations
    x, y = ann.part_xy[..., 0], ann.part_xy[..., 1]
    x1, y1, x2, y2 = (ann.boxes[:, k:k + 1] for k in range(4))
    inside = (x1 <= x) & (x < x2) & (y1 <= y) & (y < y2)
    assert bool(inside[ann.part_visible].all()) and ann.part_visible.any(axis=1).all()
    # the near side is drawn, the far side hidden: never both eyes (parts 3, 4) nor both wings (9, 10)
    assert not (ann.part_visible[:, 3] & ann.part_visible[:, 4]).any()
    assert not (ann.part_visible[:, 9] & ann.part_visible[:, 10]).any()


def test_partimagenet_polygons_cover_exactly_their_annotations_area(partimagenet: Path) -> None:
    assert sorted(p.relative_to(partimagenet).as_posix() for p in (partimagenet / "annotations").rglob("*.json")) == [
        "annotations/test/test.json", "annotations/train/train.json", "annotations/val/val.json"]
    train = json.loads((partimagenet / "annotations" / "train" / "train.json").read_text())
    assert len(train["categories"]) == 40 and train["categories"][13]["name"] == "Bird Head"
    assert [image["file_name"] for image in train["images"]] == [
        "n90000000_1.JPEG", "n90000000_3.JPEG", "n90000001_1.JPEG", "n90000001_3.JPEG"]
    for annotation in train["annotations"]:
        image = next(i for i in train["images"] if i["id"] == annotation["image_id"])
        native = polygons_to_frame([np.array(p, dtype=float).reshape(-1, 2) for p in annotation["segmentation"]],
                                   image["width"], image["height"], size=image["width"])
        assert int(native.sum()) == annotation["area"] > 0


def test_partimagenet_part_masks_are_the_nearest_resize_of_the_native_masks(partimagenet: Path) -> None:
    """Row-run rectangles scaled to the frame select, at the pixel centres, the frame pixels whose
    nearest-exact source pixel is in the part: the rasteriser agrees with an image resize."""
    train = load_dataset("partimagenet", partimagenet, "train")
    masks = part_truth(train)
    planes = masks.planes()
    for i, entries in enumerate(train.part_polygons.polygons):
        width, height = train.image_sizes[i].tolist()
        for k, part in enumerate(masks.slot_parts[i].tolist()):
            if part < 0:
                continue
            native = polygons_to_frame([v for p, v in entries if p == part], width, height, size=width)
            resized = torch.nn.functional.interpolate(torch.from_numpy(native)[None, None].float(), size=(224, 224),
                                                      mode="nearest-exact")[0, 0].bool()
            assert torch.equal(planes[i, k], resized), (i, part)
    assert (len(train), len(load_dataset("partimagenet", partimagenet, "test"))) == (4, 2)


@pytest.mark.parametrize("generate", [generate_nabirds, generate_partimagenet])
def test_generation_is_deterministic_and_never_overwrites_a_foreign_folder(tmp_path: Path, generate) -> None:
    a = generate(tmp_path / "a", classes=2, images_per_class=2, seed=3, image_size=64)
    b = generate(tmp_path / "b", classes=2, images_per_class=2, seed=3, image_size=64)
    assert _files(a) == _files(b)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ProtobenchError, match="not empty and is not a generated"):
        generate(tmp_path / "mine", classes=2, images_per_class=2, seed=3, image_size=64)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    with pytest.raises(ProtobenchError, match=f"{generate.__name__}: image_size must be an integer >= 64"):
        generate(tmp_path / "c", classes=2, images_per_class=2, seed=3, image_size=32)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "mine"]
