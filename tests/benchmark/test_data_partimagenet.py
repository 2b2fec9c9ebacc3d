"""PartImageNet (Seg release) reader on hand-written COCO files whose counts are known: classes from
the training set's synsets, parts from the categories, polygons into part masks of the whole image;
each bad input is one error naming the file, the line and the entry, before any image is decoded."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmark.data import check_images, load_dataset
from benchmark.errors import ProtobenchError
from benchmark.run.ground_truth import object_masks, part_truth

CATEGORIES = [{"id": 0, "name": "Bird Head", "supercategory": "Bird"},
              {"id": 1, "name": "Bird Body", "supercategory": "Bird"},
              {"id": 2, "name": "Bird Wing", "supercategory": "Bird"},
              {"id": 4, "name": "Fish Fin", "supercategory": "Fish"}]  # ids need not be contiguous


def _rect(x0: float, y0: float, x1: float, y1: float) -> list[float]:
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def _annotation(k: int, image: int, category: int, polygons: list[list[float]], *, area: float = 10.0,
                crowd: int = 0, bbox: list[float] | None = None) -> dict:
    return {"id": k, "image_id": image, "category_id": category, "segmentation": polygons, "area": area,
            "iscrowd": crowd, "bbox": bbox or [0, 0, 1, 1]}


def split_files() -> dict[str, dict]:
    """train: 3 images of 2 synsets; test: 2 images. Image 1 (100 × 50): head = its top-left quarter,
    body = two rectangles; image 2: a triangle wing, a zero-area and a crowd annotation (skipped);
    image 3: a two-point polygon standing for its bbox; test image 11: a fin."""
    train = {
        "images": [{"id": 1, "file_name": "n01530575_10086.JPEG", "width": 100, "height": 50},
                   {"id": 2, "file_name": "n01530575_1894.JPEG", "width": 40, "height": 40},
                   {"id": 3, "file_name": "n01531178_2000.JPEG", "width": 60, "height": 30}],
        "annotations": [_annotation(1, 1, 0, [_rect(0, 0, 50, 25)]),
                        _annotation(2, 1, 1, [_rect(50, 25, 100, 50), _rect(0, 25, 10, 50)]),
                        _annotation(3, 2, 2, [[0, 0, 40, 0, 0, 40]]),
                        _annotation(4, 2, 0, [_rect(0, 0, 40, 40)], area=0),
                        _annotation(5, 2, 1, [_rect(0, 0, 40, 40)], crowd=1),
                        _annotation(6, 3, 1, [[10, 5, 40, 20]], bbox=[10, 5, 30, 15])],
        "categories": CATEGORIES,
    }
    test = {
        "images": [{"id": 10, "file_name": "n01531178_77.JPEG", "width": 50, "height": 50},
                   {"id": 11, "file_name": "n01530575_5.JPEG", "width": 30, "height": 20}],
        "annotations": [_annotation(1, 11, 4, [_rect(0, 0, 30, 20)])],
        "categories": CATEGORIES,
    }
    return {"train": train, "test": test}


def write_partimagenet(root: Path, files: dict[str, dict | str] | None = None) -> Path:
    """The tiny PartImageNet_Seg tree under ``root/PartImageNet`` (JSON indented: one entry spans
    several lines); ``files`` replaces a split's annotation file (a dict, or raw text)."""
    base = root / "PartImageNet"
    contents = {**split_files(), **(files or {})}
    rng = np.random.default_rng(0)
    for split, content in contents.items():
        folder = base / "annotations" / split
        folder.mkdir(parents=True)
        (folder / f"{split}.json").write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
        (base / "images" / split).mkdir(parents=True)
    for split, content in split_files().items():
        for image in content["images"]:
            array = rng.integers(0, 256, (image["height"], image["width"], 3), dtype=np.uint8)
            Image.fromarray(array).save(base / "images" / split / image["file_name"], format="JPEG")
    return root


def test_reads_the_known_counts_classes_parts_and_polygons(tmp_path: Path) -> None:
    root = write_partimagenet(tmp_path)
    train, test = load_dataset("partimagenet", root, "train"), load_dataset("partimagenet", root, "test")
    assert (len(train), len(test)) == (3, 2)
    assert train.class_names == test.class_names == ["n01530575", "n01531178"]
    assert train.labels.tolist() == [0, 0, 1] and test.labels.tolist() == [1, 0]
    assert train.part_polygons.part_names == ["Bird Head", "Bird Body", "Bird Wing", "Fish Fin"]
    assert [[part for part, _ in image] for image in train.part_polygons.polygons] == [[0, 1, 1], [2], [1]]
    assert train.part_polygons.polygons[2][0][1].tolist() == [[10, 5], [10, 20], [40, 20], [40, 5]]  # its bbox
    assert train.image_sizes.tolist() == [[100, 50], [40, 40], [60, 30]]
    assert train.annotations is None and train.load_image(0).size == (100, 50)  # the whole image
    check_images(train)
    check_images(test)


def test_polygons_become_part_masks_of_the_whole_image(tmp_path: Path) -> None:
    train = load_dataset("partimagenet", write_partimagenet(tmp_path), "train")
    masks = part_truth(train)
    assert masks.num_parts == 4 and masks.visible.tolist() == [[True, True, False, False], [False, False, True, False],
                                                              [False, True, False, False]]
    planes = masks.planes()
    head = planes[0, 0].numpy()  # the top-left quarter of the 100 × 50 image is the top-left quarter of the frame
    assert head[:112, :112].all() and not head[112:].any() and not head[:, 112:].any()
    body = planes[0, 1].numpy()  # the bottom-right quarter and the strip [0, 10) × [25, 50): columns < 22.4
    assert body[112:, 112:].all() and body[112:, :22].all() and not body[112:, 23:112].any() and not body[:112].any()
    wing = planes[1, 0].numpy()  # the triangle below the anti-diagonal's complement: x + y < 40 in image pixels
    rows, cols = np.indices(wing.shape)
    assert np.array_equal(wing, (cols + 0.5) + (rows + 0.5) < 224)
    assert np.array_equal(object_masks(train, masks).numpy(), planes.any(dim=1).numpy())


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d["annotations"][3].update(image_id=99), r"annotations\[3\]\): image_id 99 is not listed in 'images'"),
        (lambda d: d["annotations"][1].update(category_id=3), r"annotations\[1\]\): category_id 3 is not listed"),
        (lambda d: d["annotations"][0]["segmentation"][0].__setitem__(2, 100.5),
         r"annotations\[0\]\): polygon 0 has the vertex \(100.5, 0\) outside its 100 × 50 image"),
        (lambda d: d["annotations"][2].update(segmentation={"counts": "x", "size": [40, 40]}),
         r"annotations\[2\]\): 'segmentation' must be a non-empty list of polygons"),
        (lambda d: d["annotations"][2]["segmentation"][0].append(7), r"annotations\[2\]\): polygon 0 must be a list"),
        (lambda d: d["images"][1].update(file_name="img_1894.JPEG"), r"images\[1\]\): file_name 'img_1894.JPEG' does not"),
        (lambda d: d["images"][2].update(file_name="../n01531178_2000.JPEG"), r"images\[2\]\): file_name"),
        (lambda d: d["images"][2].update(id=1), r"images\[2\]\): image id 1 already appeared at images\[0\]"),
        (lambda d: d["images"][0].update(width="100"), r"images\[0\]\): 'width' must be an int, got '100'"),
    ],
)
def test_a_corrupt_entry_is_named_by_file_line_and_index(tmp_path: Path, change, says: str) -> None:
    train = split_files()["train"]
    change(train)
    root = write_partimagenet(tmp_path, {"train": train})
    lines = (root / "PartImageNet" / "annotations" / "train" / "train.json").read_text().splitlines()
    with pytest.raises(ProtobenchError, match=says) as err:
        load_dataset("partimagenet", root, "train")
    message = str(err.value)
    line = int(message.split(", line ")[1].split(" ")[0])
    key, index = message.split(" (")[1].split(")")[0].rstrip("]").split("[")
    # the named line is the one where that entry starts in the indented file
    key_line = next(n for n, row in enumerate(lines, 1) if row.startswith(f' "{key}"'))
    entries = [n for n, row in enumerate(lines, 1) if row == "  {" and n > key_line]
    assert line == entries[int(index)], message


def test_missing_files_invalid_json_and_unknown_synsets_are_named(tmp_path: Path) -> None:
    root = write_partimagenet(tmp_path / "a")
    (root / "PartImageNet" / "annotations" / "test" / "test.json").unlink()
    with pytest.raises(ProtobenchError, match=r"annotation file .*test.json is missing"):
        load_dataset("partimagenet", root, "test")
    root = write_partimagenet(tmp_path / "b", {"test": '{"images": [\n{"id": 1,,\n'})
    with pytest.raises(ProtobenchError, match=r"test.json, line 2: not valid JSON"):
        load_dataset("partimagenet", root, "test")
    test = split_files()["test"]
    test["images"][0]["file_name"] = "n09999999_1.JPEG"
    root = write_partimagenet(tmp_path / "c", {"test": test})
    with pytest.raises(ProtobenchError, match=r"images\[0\]\): synset n09999999 .* has no image in the training set"):
        load_dataset("partimagenet", root, "test")
    root = write_partimagenet(tmp_path / "d")
    (root / "PartImageNet" / "images" / "test" / "n01531178_77.JPEG").unlink()
    with pytest.raises(ProtobenchError, match=r"n01531178_77.JPEG listed in .*test.json is missing"):
        load_dataset("partimagenet", root, "test")


def test_an_image_whose_size_is_not_its_json_size_is_refused_before_compute(tmp_path: Path) -> None:
    test = split_files()["test"]
    test["images"][1]["width"] = 31
    test["annotations"] = []
    test_set = load_dataset("partimagenet", write_partimagenet(tmp_path, {"test": test}), "test")
    with pytest.raises(ProtobenchError, match=r"n01530575_5.JPEG is 30×20 but its annotations give 31×20"):
        check_images(test_set)
