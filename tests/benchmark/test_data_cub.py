"""CUB reader and the shared preprocessing: exact crop/resize, strict validation, fingerprints."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from benchmark.data import generate_synthbirds, load_dataset
from benchmark.data.transforms import IMAGENET_MEAN, IMAGENET_STD, integer_box
from benchmark.errors import ProtobenchError

RED, BLUE = (255, 0, 0), (0, 0, 255)


def _write_cub(root: Path, images: list[tuple[str, Image.Image, str, int]], parts: int = 2) -> Path:
    """A hand-made CUB tree; ``images`` = (relative path, image, box line 'x y w h', is_train)."""
    (root / "parts").mkdir(parents=True)
    classes = sorted({rel.split("/")[0] for rel, *_ in images})
    (root / "classes.txt").write_text("".join(f"{k} {c}\n" for k, c in enumerate(classes, 1)))
    (root / "parts" / "parts.txt").write_text("".join(f"{p} part {p}\n" for p in range(1, parts + 1)))
    files = {"images.txt": "", "image_class_labels.txt": "", "train_test_split.txt": "", "bounding_boxes.txt": ""}
    locs = ""
    for image_id, (rel, image, box, train) in enumerate(images, 1):
        (root / "images" / rel).parent.mkdir(parents=True, exist_ok=True)
        image.save(root / "images" / rel)
        files["images.txt"] += f"{image_id} {rel}\n"
        files["image_class_labels.txt"] += f"{image_id} {classes.index(rel.split('/')[0]) + 1}\n"
        files["train_test_split.txt"] += f"{image_id} {train}\n"
        files["bounding_boxes.txt"] += f"{image_id} {box}\n"
        for p in range(1, parts + 1):
            locs += f"{image_id} {p} {3.7 * p:.1f} {2.2 * p:.1f} {p % 2}\n"
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "parts" / "part_locs.txt").write_text(locs)
    return root


def _normalised(rgb: tuple[int, int, int]) -> torch.Tensor:
    return (torch.tensor(rgb) / 255.0 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)


@pytest.fixture()
def tiny_cub(tmp_path: Path) -> Path:
    """Image 1 (train): blue 20×12 with red exactly on the integer box (2, 1, 10, 7) of box
    '2.7 1.2 8.9 6.5'; image 2 (test): random noise; image 3 (test): greyscale."""
    rng = np.random.default_rng(0)
    a = np.zeros((12, 20, 3), np.uint8)
    a[:] = BLUE
    a[1:7, 2:10] = RED
    noise = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    grey = Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8), mode="L")
    return _write_cub(tmp_path / "CUB_200_2011", [
        ("001.Red/red_1.png", Image.fromarray(a), "2.7 1.2 8.9 6.5", 1),
        ("002.Noise/noise_2.png", Image.fromarray(noise), "5.0 3.0 31.0 20.0", 0),
        ("002.Noise/grey_3.png", grey, "0.0 0.0 16.0 16.0", 0),
    ])


def test_integer_box_matches_the_known_answers() -> None:
    assert integer_box(60.0, 27.0, 325.0, 304.0) == (60, 27, 385, 331)  # docs/protocol/metrics.md
    assert integer_box(60.7, 27.2, 325.9, 304.5) == (60, 27, 385, 331)  # each value truncated


def test_crop_then_resize_matches_a_hand_computation(tiny_cub: Path) -> None:
    train = load_dataset("cub", tiny_cub.parent, "train", image_size=4)
    assert train.annotations.boxes.tolist() == [[2, 1, 10, 7]]
    assert train.load_image(0).size == (8, 6)
    image, label, index = train[0]
    assert image.shape == (3, 4, 4) and image.dtype == torch.float32 and (label, index) == (0, 0)
    # the crop is exactly the red rectangle: a one-pixel error would blend blue into the border
    assert torch.allclose(image, _normalised(RED)[:, None, None].expand(3, 4, 4), atol=1e-6)

    test = load_dataset("cub", tiny_cub, "test", image_size=7)
    noise = np.asarray(Image.open(test.image_paths[0]))
    expected = Image.fromarray(noise[3:23, 5:36]).resize((7, 7), Image.Resampling.BILINEAR)
    expected = torch.from_numpy(np.asarray(expected, dtype=np.float32) / 255.0).permute(2, 0, 1)
    expected = (expected - torch.tensor(IMAGENET_MEAN)[:, None, None]) / torch.tensor(IMAGENET_STD)[:, None, None]
    assert torch.allclose(test[0][0], expected, atol=1e-6)
    assert test[1][0].shape == (3, 7, 7)  # the greyscale image comes out as RGB


def test_parts_are_read_exactly(tiny_cub: Path) -> None:
    ds = load_dataset("cub", tiny_cub, "test")
    ann = ds.annotations
    assert ann.part_names == ["part 1", "part 2"]
    assert ann.part_visible.tolist() == [[True, False], [True, False]]
    assert ann.part_xy.tolist() == [[[3, 2], [0, 0]], [[3, 2], [0, 0]]]  # int(3.7), int(2.2); hidden → 0
    assert ann.segmentation_paths == [None, None]
    assert ds.labels.tolist() == [1, 1] and ds.class_names == ["001.Red", "002.Noise"]


def test_segmentations_next_to_the_cub_folder_are_found(tiny_cub: Path) -> None:
    mask = tiny_cub.parent / "segmentations" / "002.Noise" / "noise_2.png"
    mask.parent.mkdir(parents=True)
    Image.new("L", (40, 30)).save(mask)
    assert load_dataset("cub", tiny_cub.parent, "test").annotations.segmentation_paths == [mask, None]


@pytest.mark.parametrize("missing", ["bounding_boxes.txt", "parts/part_locs.txt", "classes.txt"])
def test_a_missing_annotation_file_is_named(tiny_cub: Path, missing: str) -> None:
    (tiny_cub / missing).unlink()
    with pytest.raises(ProtobenchError, match=missing.split("/")[-1]):
        load_dataset("cub", tiny_cub, "train")


def test_a_missing_image_is_named_before_decoding(tiny_cub: Path) -> None:
    (tiny_cub / "images" / "002.Noise" / "grey_3.png").unlink()
    load_dataset("cub", tiny_cub, "train")  # the train split does not need it
    with pytest.raises(ProtobenchError, match="grey_3.png"):
        load_dataset("cub", tiny_cub, "test")


@pytest.mark.parametrize(
    ("file", "line", "content", "why"),
    [
        ("bounding_boxes.txt", 2, "2 5.0 3.0 31.0", "expected"),
        ("bounding_boxes.txt", 3, "3 0.0 zero 16.0 16.0", "numbers"),
        ("bounding_boxes.txt", 3, "3 0.0 nan 16.0 16.0", "numbers"),
        ("bounding_boxes.txt", 1, "1 2.7 1.2 0.5 6.5", "width, height >= 1"),
        ("image_class_labels.txt", 2, "2 7", "class id 7"),
        ("train_test_split.txt", 2, "2 2", "1 \\(train\\) or 0"),
        ("images.txt", 3, "1 002.Noise/grey_3.png", "already appeared on line 1"),
        ("parts/part_locs.txt", 4, "2 9 1.0 1.0 1", "part id 9"),
        ("parts/part_locs.txt", 5, "3 1 1.0 1.0 3", "visibility"),
    ],
)
def test_a_malformed_line_is_named_with_file_and_line(tiny_cub: Path, file: str, line: int, content: str, why: str) -> None:
    path = tiny_cub / file
    lines = path.read_text().splitlines()
    lines[line - 1] = content
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProtobenchError, match=f"{file.split('/')[-1]}, line {line}: .*{why}"):
        load_dataset("cub", tiny_cub, "train")


def test_a_box_outside_its_image_is_named(tiny_cub: Path) -> None:
    (tiny_cub / "bounding_boxes.txt").write_text("1 25.0 1.0 8.0 6.0\n2 5.0 3.0 31.0 20.0\n3 0.0 0.0 16.0 16.0\n")
    with pytest.raises(ProtobenchError, match="red_1.png starts outside the 20×12 image"):
        load_dataset("cub", tiny_cub, "train")[0]


def test_inconsistent_ids_are_reported(tiny_cub: Path) -> None:
    path = tiny_cub / "image_class_labels.txt"
    path.write_text("\n".join(path.read_text().splitlines()[:2]) + "\n")
    with pytest.raises(ProtobenchError, match="image_class_labels.txt has no line for image id 3"):
        load_dataset("cub", tiny_cub, "train")
    path = tiny_cub / "parts" / "part_locs.txt"
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    (tiny_cub / "image_class_labels.txt").write_text("1 1\n2 2\n3 2\n")
    with pytest.raises(ProtobenchError, match="part_locs.txt has no line for image 3 part 2"):
        load_dataset("cub", tiny_cub, "train")


def test_a_corrupt_jpeg_is_named_when_decoded(tmp_path: Path) -> None:
    root = generate_synthbirds(tmp_path / "sb", classes=2, images_per_class=2, seed=0)
    ds = load_dataset("synthbirds", root, "train")
    data = ds.image_paths[1].read_bytes()
    ds.image_paths[1].write_bytes(data[: len(data) // 3])  # truncated
    ds.image_paths[0].write_bytes(b"this is not a jpeg")
    for i in (0, 1):
        with pytest.raises(ProtobenchError, match=ds.image_paths[i].name):
            ds[i]


def test_unknown_names_and_roots_are_user_errors(tmp_path: Path, tiny_cub: Path) -> None:
    with pytest.raises(ProtobenchError, match="Unknown dataset 'imagenet'.*cub, synthbirds, dogs, cars"):
        load_dataset("imagenet", tmp_path, "train")
    with pytest.raises(ProtobenchError, match="Unknown split 'val'"):
        load_dataset("cub", tiny_cub, "val")
    with pytest.raises(ProtobenchError, match="not a folder"):
        load_dataset("cub", tmp_path / "nowhere", "train")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProtobenchError, match="No images.txt"):
        load_dataset("cub", tmp_path / "empty", "train")


def test_fingerprint_is_stable_and_tracks_annotations_and_images(tmp_path: Path) -> None:
    root = generate_synthbirds(tmp_path / "sb", classes=2, images_per_class=4, seed=0)
    train = load_dataset("synthbirds", root, "train")
    first = train.fingerprint()
    assert len(first) == 16 and int(first, 16) >= 0
    assert load_dataset("synthbirds", root, "train").fingerprint() == first
    assert load_dataset("synthbirds", root, "train", image_size=112).fingerprint() == first
    assert load_dataset("synthbirds", root, "test").fingerprint() != first

    boxes = root / "bounding_boxes.txt"
    original = boxes.read_text()
    boxes.write_text(original.replace("\n", " \n", 1))  # same parse, different bytes
    assert load_dataset("synthbirds", root, "train").fingerprint() != first
    boxes.write_text(original)
    assert load_dataset("synthbirds", root, "train").fingerprint() == first

    with open(train.image_paths[0], "ab") as f:  # an image replaced by one of another size
        f.write(b"\0")
    assert load_dataset("synthbirds", root, "train").fingerprint() != first


def test_fingerprint_tracks_the_image_set(tmp_path: Path) -> None:
    root = generate_synthbirds(tmp_path / "sb", classes=2, images_per_class=4, seed=0)
    first = load_dataset("synthbirds", root, "train").fingerprint()
    split = root / "train_test_split.txt"
    split.write_text(split.read_text().replace("2 0\n", "2 1\n"))  # image 2 moves to train
    moved = load_dataset("synthbirds", root, "train")
    assert len(moved) == 5 and moved.fingerprint() != first


def test_fingerprint_does_not_depend_on_where_the_dataset_lives(tiny_cub: Path, tmp_path: Path) -> None:
    mask = tiny_cub.parent / "segmentations" / "002.Noise" / "noise_2.png"
    mask.parent.mkdir(parents=True)
    Image.new("L", (40, 30)).save(mask)
    first = load_dataset("cub", tiny_cub.parent, "test").fingerprint()
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for name in ("CUB_200_2011", "segmentations"):
        (tiny_cub.parent / name).rename(moved / name)
    assert load_dataset("cub", moved, "test").fingerprint() == first


def test_fingerprint_is_computed_once_per_loaded_split(tmp_path: Path, monkeypatch) -> None:
    from benchmark.data import dataset as dataset_module

    root = generate_synthbirds(tmp_path / "sb", classes=2, images_per_class=2, seed=0)
    train = load_dataset("synthbirds", root, "train")
    calls = []
    compute = dataset_module.split_fingerprint
    monkeypatch.setattr(dataset_module, "split_fingerprint", lambda **kw: calls.append(1) or compute(**kw))
    assert train.fingerprint() == train.fingerprint() == load_dataset("synthbirds", root, "train").fingerprint()
    assert len(calls) == 2  # one pass over the files per loaded split, however often a run asks

