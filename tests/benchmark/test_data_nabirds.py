"""NABirds reader on a hand-written tiny tree whose counts are known: the leaf classes, the official
split, boxes, sizes and 0-based parts as the official layout has them; each bad input is one error
naming the file and the line, before any image is decoded."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmark.data import check_images, load_dataset
from benchmark.errors import ProtobenchError

# Five images of three leaf classes (10, 11 under family 1, 12 under family 2; root 0 "Birds"),
# three train and two test; three parts, ids 0..2. Image ids are UUIDs as in the official files.
IDS = ["0a1b2c3d-0000-4000-8000-000000000001", "0a1b2c3d-0000-4000-8000-000000000002",
       "0a1b2c3d-0000-4000-8000-000000000003", "0a1b2c3d-0000-4000-8000-000000000004",
       "0a1b2c3d-0000-4000-8000-000000000005"]
CLASS_OF = [11, 10, 12, 11, 10]
TRAIN = [1, 1, 0, 1, 0]
SIZES = [(40, 30), (32, 32), (20, 24), (40, 30), (32, 32)]
BOXES = ["2 3 30 20", "0 0 32 32", "5 4 10 12", "1 1 20 20", "4 5 16 16"]
FILES = {
    "classes.txt": "0 Birds\n1 Hummingbirds\n2 Ducks\n10 Anna's Hummingbird (Adult male)\n"
                   "11 Anna's Hummingbird (Female/juvenile)\n12 Mallard\n",
    "hierarchy.txt": "1 0\n2 0\n10 1\n11 1\n12 2\n",
    "parts/parts.txt": "0 bill\n1 crown\n2 left wing\n",
}


def write_nabirds(root: Path, files: dict[str, str] | None = None) -> Path:
    """The tiny tree under ``root/nabirds``; ``files`` replaces whole annotation files."""
    base = root / "nabirds"
    (base / "parts").mkdir(parents=True)
    text = dict(FILES)
    text["images.txt"] = "".join(f"{i} {c:04d}/{i.replace('-', '')}.jpg\n" for i, c in zip(IDS, CLASS_OF))
    text["image_class_labels.txt"] = "".join(f"{i} {c}\n" for i, c in zip(IDS, CLASS_OF))
    text["train_test_split.txt"] = "".join(f"{i} {t}\n" for i, t in zip(IDS, TRAIN))
    text["sizes.txt"] = "".join(f"{i} {w} {h}\n" for i, (w, h) in zip(IDS, SIZES))
    text["bounding_boxes.txt"] = "".join(f"{i} {b}\n" for i, b in zip(IDS, BOXES))
    # part p of image k at (3k + p + 2, k + 2p + 1); part 2 hidden on even images (0 0 0 as NABirds writes it)
    text["parts/part_locs.txt"] = "".join(
        f"{i} {p} {0 if p == 2 and k % 2 == 0 else 3 * k + p + 2} {0 if p == 2 and k % 2 == 0 else k + 2 * p + 1} "
        f"{0 if p == 2 and k % 2 == 0 else 1}\n" for k, i in enumerate(IDS) for p in range(3))
    text.update(files or {})
    for rel, content in text.items():
        (base / rel).write_text(content)
    rng = np.random.default_rng(0)
    for i, c, (w, h) in zip(IDS, CLASS_OF, SIZES):
        path = base / "images" / f"{c:04d}" / f"{i.replace('-', '')}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
    return root


def test_reads_the_known_counts_leaf_classes_boxes_and_parts(tmp_path: Path) -> None:
    root = write_nabirds(tmp_path)
    train, test = load_dataset("nabirds", root, "train"), load_dataset("nabirds", root, "test")
    assert (len(train), len(test)) == (3, 2)
    names = ["Anna's Hummingbird (Adult male)", "Anna's Hummingbird (Female/juvenile)", "Mallard"]
    assert train.class_names == test.class_names == names  # the leaves, by class id; not root or families
    assert train.labels.tolist() == [1, 0, 1] and test.labels.tolist() == [2, 0]  # images.txt order
    assert [p.name for p in train.image_paths] == [IDS[k].replace("-", "") + ".jpg" for k in (0, 1, 3)]
    ann = train.annotations
    assert ann.part_names == ["bill", "crown", "left wing"]
    assert ann.boxes.tolist() == [[2, 3, 32, 23], [0, 0, 32, 32], [1, 1, 21, 21]]
    assert ann.part_xy[:, :, 0].tolist() == [[2, 3, 0], [5, 6, 7], [11, 12, 13]]  # image 0's wing hidden: 0
    assert ann.part_visible.tolist() == [[True, True, False], [True, True, True], [True, True, True]]
    assert ann.segmentation_paths == [None] * 3
    assert train.image_sizes.tolist() == [[40, 30], [32, 32], [40, 30]]
    assert train.load_image(0).size == (30, 20)  # cropped to its box, as CUB
    check_images(train)
    check_images(test)


def test_the_reader_finds_the_nabirds_folder_or_the_root_itself(tmp_path: Path) -> None:
    root = write_nabirds(tmp_path)
    assert len(load_dataset("nabirds", root / "nabirds", "test")) == 2
    with pytest.raises(ProtobenchError, match="No images.txt found"):
        load_dataset("nabirds", tmp_path / "nabirds" / "parts", "test")


def _replace_line(text: str, line: int, new: str) -> str:
    lines = text.splitlines()
    lines[line - 1] = new
    return "\n".join(lines) + "\n"


def _base_text(tmp_path: Path, rel: str) -> str:
    write_nabirds(tmp_path / "base")
    return (tmp_path / "base" / "nabirds" / rel).read_text()


@pytest.mark.parametrize(
    ("rel", "line", "new", "says"),
    [
        ("parts/part_locs.txt", 5, f"{IDS[1]} 3 1 1 1", "part id 3 is not listed in parts/parts.txt"),
        ("parts/part_locs.txt", 2, f"{IDS[0]} 1 x 1 1", "expected '<image_id> <part_id> <x> <y> <visible 0/1>'"),
        ("train_test_split.txt", 4, "0a1b2c3d-ffff-4000-8000-000000000009 1", "is not listed in images.txt"),
        ("image_class_labels.txt", 3, f"{IDS[2]} 2", "class 2 has child classes in hierarchy.txt"),
        ("image_class_labels.txt", 1, f"{IDS[0]} 99", "class id 99 is not listed in classes.txt"),
        ("hierarchy.txt", 4, "11 7", "parent class 7 is not listed in classes.txt"),
        ("hierarchy.txt", 1, "1 10", "form a cycle"),
        ("bounding_boxes.txt", 2, f"{IDS[1]} 32 0 4 4", "starts outside its 32×32 image (sizes.txt, line 2)"),
        ("sizes.txt", 5, f"{IDS[4]} 0 32", "width, height >= 1"),
        ("parts/parts.txt", 3, "3 left wing", "part ids must be 0..2"),
    ],
)
def test_a_corrupt_line_is_named_by_file_and_line(tmp_path: Path, rel: str, line: int, new: str, says: str) -> None:
    root = write_nabirds(tmp_path, {rel: _replace_line(_base_text(tmp_path, rel), line, new)})
    with pytest.raises(ProtobenchError) as err:
        load_dataset("nabirds", root, "train")
    assert f"{rel}, line {line}:" in str(err.value) and says in str(err.value), str(err.value)


def test_an_image_missing_from_one_file_is_named_with_its_images_txt_line(tmp_path: Path) -> None:
    text = _base_text(tmp_path, "bounding_boxes.txt")
    root = write_nabirds(tmp_path, {"bounding_boxes.txt": "".join(text.splitlines(keepends=True)[:3]
                                                                  + text.splitlines(keepends=True)[4:])})
    with pytest.raises(ProtobenchError, match=rf"bounding_boxes.txt has no line for image id {IDS[3]} "
                                              r"\(images.txt, line 4; 1 ids missing"):
        load_dataset("nabirds", root, "test")


def test_a_missing_file_and_a_missing_part_location_are_named(tmp_path: Path) -> None:
    root = write_nabirds(tmp_path / "a")
    (root / "nabirds" / "sizes.txt").unlink()
    with pytest.raises(ProtobenchError, match=r"NABirds annotation file .*sizes.txt is missing"):
        load_dataset("nabirds", root, "train")
    text = _base_text(tmp_path, "parts/part_locs.txt")
    root = write_nabirds(tmp_path / "b", {"parts/part_locs.txt": "".join(text.splitlines(keepends=True)[:-1])})
    with pytest.raises(ProtobenchError, match=rf"part_locs.txt has no line for image {IDS[4]} part 2"):
        load_dataset("nabirds", root, "test")


def test_an_image_whose_size_is_not_its_sizes_line_is_refused_before_compute(tmp_path: Path) -> None:
    root = write_nabirds(tmp_path, {"sizes.txt": "".join(f"{i} {w} {h}\n" for i, (w, h) in
                                                         zip(IDS, [(40, 30), (33, 32), *SIZES[2:]]))})
    train = load_dataset("nabirds", root, "train")
    with pytest.raises(ProtobenchError, match=r"is 32×32 but its annotations give 33×32"):
        check_images(train)


def test_a_part_location_outside_its_image_is_refused_as_a_box_is(tmp_path: Path) -> None:
    """Round 6: x = 5000 on a 40 × 30 image was read; now refused naming the file, image and size."""
    text = _base_text(tmp_path, "parts/part_locs.txt").splitlines(keepends=True)
    text[0] = f"{IDS[0]} 0 5000 3 1\n"
    root = write_nabirds(tmp_path / "b", {"parts/part_locs.txt": "".join(text)})
    with pytest.raises(ProtobenchError, match=rf"part_locs.txt: image {IDS[0]} part 0 lies at \(5000, 3\), outside "
                                              r"its 40×30 image \(sizes.txt, line 1\)"):
        load_dataset("nabirds", root, "train")
    hidden = text.copy()
    hidden[0] = f"{IDS[0]} 0 0 0 0\n"  # a hidden part at (0, 0), as NABirds writes it: fine
    load_dataset("nabirds", write_nabirds(tmp_path / "c", {"parts/part_locs.txt": "".join(hidden)}), "train")
