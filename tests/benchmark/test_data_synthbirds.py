"""synthbirds: the generator writes the exact CUB layout, deterministically, with exact parts."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmark.data import loading as data_module
from benchmark.data import DATASETS, generate_synthbirds, load_dataset
from benchmark.data import bird_classes, synthbirds
from benchmark.data.cub import ANNOTATION_FILES
from benchmark.errors import ProtobenchError

CUB_PARTS = [
    "back", "beak", "belly", "breast", "crown", "forehead", "left eye", "left leg",
    "left wing", "nape", "right eye", "right leg", "right wing", "tail", "throat",
]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def birds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_synthbirds(tmp_path_factory.mktemp("sb") / "synthbirds", classes=3, images_per_class=4, seed=7)


def test_writes_every_file_of_the_cub_layout(birds: Path) -> None:
    for rel in ANNOTATION_FILES:
        assert (birds / rel).is_file(), rel
    assert (birds / synthbirds.MARKER).is_file()
    lines = (birds / "images.txt").read_text().splitlines()
    assert len(lines) == 12
    for line in lines:
        image_id, rel = line.split()
        assert re.fullmatch(r"\d{3}\.Synthbird_[a-z]+/Synthbird_[a-z]+_\d{4}_" + image_id + r"\.jpg", rel)
        assert rel.split("/")[0].split(".", 1)[1] == rel.split("/")[1].rsplit("_", 2)[0]
        assert (birds / "images" / rel).is_file()
        mask = birds / "segmentations" / Path(rel).with_suffix(".png")
        assert mask.is_file()
    assert (birds / "classes.txt").read_text() == "1 001.Synthbird_a\n2 002.Synthbird_b\n3 003.Synthbird_c\n"
    assert (birds / "parts" / "parts.txt").read_text().splitlines() == [
        f"{k} {name}" for k, name in enumerate(CUB_PARTS, start=1)
    ]
    assert len((birds / "parts" / "part_locs.txt").read_text().splitlines()) == 12 * 15
    with Image.open(birds / "images" / lines[0].split()[1]) as image:
        assert image.format == "JPEG" and image.size == (256, 256) and image.mode == "RGB"


def test_reader_reads_it_back_with_consistent_labels_and_split(birds: Path) -> None:
    assert "synthbirds" in DATASETS
    assert set(data_module._READERS) == set(DATASETS)  # every dataset a grid may name has a reader
    train = load_dataset("synthbirds", birds, "train")
    test = load_dataset("synthbirds", birds, "test")
    assert (len(train), len(test)) == (6, 6)
    for ds in (train, test):
        assert ds.name == "synthbirds" and ds.num_classes == 3
        assert ds.class_names == ["001.Synthbird_a", "002.Synthbird_b", "003.Synthbird_c"]
        assert np.bincount(ds.labels, minlength=3).tolist() == [2, 2, 2]
        for label, path in zip(ds.labels, ds.image_paths):
            assert path.parent.name == ds.class_names[label]
        assert ds.annotations is not None and ds.annotations.part_names == CUB_PARTS
        assert all(p is not None and p.is_file() for p in ds.annotations.segmentation_paths)
    assert not set(train.image_paths) & set(test.image_paths)
    image, label, index = test[1]
    assert image.shape == (3, 224, 224) and label == test.labels[1] and index == 1


@pytest.mark.parametrize("images_per_class", [1, 2, 3])
def test_split_is_about_half_with_both_sides_from_two_images(tmp_path: Path, images_per_class: int) -> None:
    root = generate_synthbirds(tmp_path / "sb", classes=2, images_per_class=images_per_class, seed=0)
    flags = [int(line.split()[1]) for line in (root / "train_test_split.txt").read_text().splitlines()]
    per_class = [flags[k * images_per_class:(k + 1) * images_per_class] for k in range(2)]
    for f in per_class:
        assert sum(f) == (images_per_class + 1) // 2
        assert (images_per_class - sum(f) >= 1) == (images_per_class >= 2)


def test_keypoints_are_exact_visible_on_the_bird_and_zero_when_hidden(birds: Path) -> None:
    for split in ("train", "test"):
        ds = load_dataset("synthbirds", birds, split)
        ann = ds.annotations
        assert ann.boxes.dtype == np.int64 and ann.part_xy.dtype == np.int64 and ann.part_visible.dtype == bool
        left = [CUB_PARTS.index(f"left {p}") for p in ("eye", "wing", "leg")]
        right = [CUB_PARTS.index(f"right {p}") for p in ("eye", "wing", "leg")]
        for i in range(len(ds)):
            mask = np.asarray(Image.open(ann.segmentation_paths[i])) == 255
            rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
            x1, y1, x2, y2 = ann.boxes[i]
            assert (x1, y1, x2, y2) == (cols[0], rows[0], cols[-1] + 1, rows[-1] + 1)  # tight mask box
            vis = ann.part_visible[i]
            assert vis.sum() >= 8
            for (x, y), v in zip(ann.part_xy[i], vis):
                if v:
                    assert 0 <= x < 256 and 0 <= y < 256
                    assert x1 <= x <= x2 and y1 <= y <= y2
                    assert mask[y, x]
                else:
                    assert (x, y) == (0, 0)
            assert not (vis[left].any() and vis[right].any())  # only the near side shows
            assert vis[left].any() or vis[right].any()


def test_pose_shows_both_sides_across_images(tmp_path: Path) -> None:
    root = generate_synthbirds(tmp_path / "sb", classes=2, images_per_class=8, seed=3)
    ann = load_dataset("synthbirds", root, "train").annotations
    assert ann.part_visible[:, CUB_PARTS.index("left wing")].any()
    assert ann.part_visible[:, CUB_PARTS.index("right wing")].any()


def test_generation_is_byte_identical_and_seed_dependent(tmp_path: Path) -> None:
    a = _files(generate_synthbirds(tmp_path / "a", classes=2, images_per_class=3, seed=11))
    b = _files(generate_synthbirds(tmp_path / "b", classes=2, images_per_class=3, seed=11))
    c = _files(generate_synthbirds(tmp_path / "c", classes=2, images_per_class=3, seed=12))
    assert a == b
    assert a.keys() == c.keys()
    assert a["images.txt"] == c["images.txt"]
    assert a["parts/part_locs.txt"] != c["parts/part_locs.txt"]
    assert all(a[k] != c[k] for k in a if k.endswith(".jpg"))


def test_classes_are_separable_by_colour_alone(tmp_path: Path) -> None:
    """Nearest class mean of the hue histogram of saturated pixels (the class-coloured parts;
    body and background are desaturated) classifies the test split."""
    root = generate_synthbirds(tmp_path / "sb", classes=5, images_per_class=6, seed=1)

    def features(split: str) -> tuple[np.ndarray, np.ndarray]:
        ds = load_dataset("synthbirds", root, split)
        hists = []
        for i in range(len(ds)):
            hsv = np.asarray(ds.load_image(i).convert("HSV")).reshape(-1, 3)
            hue = hsv[(hsv[:, 1] > 120) & (hsv[:, 2] > 60), 0]
            hist = np.bincount(hue // 16, minlength=16).astype(float)
            hists.append(hist / max(hist.sum(), 1.0))
        return np.array(hists), ds.labels

    x_train, y_train = features("train")
    x_test, y_test = features("test")
    means = np.stack([x_train[y_train == k].mean(0) for k in range(5)])
    predicted = np.argmin(((x_test[:, None] - means[None]) ** 2).sum(-1), axis=1)
    assert (predicted == y_test).mean() >= 0.8


def test_class_colour_codes_are_well_separated() -> None:
    rng = np.random.default_rng(0)
    classes = bird_classes.design_classes(10, rng)
    codes = np.array([[bird_classes.PALETTE.index(getattr(c, part)) for part in ("crown", "wing", "breast", "tail")]
                      for c in classes])
    distances = (codes[:, None] != codes[None]).sum(-1)
    assert distances[~np.eye(10, dtype=bool)].min() >= 3
    assert [c.name for c in classes[:2]] == ["Synthbird_a", "Synthbird_b"]
    assert bird_classes.class_suffix(26) == "aa" and bird_classes.class_suffix(27) == "ab"


def test_refuses_a_non_empty_foreign_folder(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ProtobenchError, match="not a synthbirds dataset"):
        generate_synthbirds(out, classes=2, images_per_class=2, seed=0)
    assert (out / "notes.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1


def test_reuses_same_arguments_and_replaces_other_synthbirds_output(tmp_path: Path) -> None:
    out = tmp_path / "sb"
    generate_synthbirds(out, classes=3, images_per_class=2, seed=0)
    stamp = (out / "images.txt").stat().st_mtime_ns
    generate_synthbirds(out, classes=3, images_per_class=2, seed=0)
    assert (out / "images.txt").stat().st_mtime_ns == stamp
    generate_synthbirds(out, classes=2, images_per_class=2, seed=0)
    assert len((out / "images.txt").read_text().splitlines()) == 4
    assert sorted(p.name for p in (out / "images").iterdir()) == ["001.Synthbird_a", "002.Synthbird_b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sb"]


def test_a_grid_generates_a_missing_folder_and_refuses_one_made_otherwise(tmp_path: Path) -> None:
    out = tmp_path / "sb"
    synthbirds.ensure_synthbirds(out, {"classes": 2, "images_per_class": 2, "image_size": 64})
    record = synthbirds._marker(out)
    assert record is not None and record["classes"] == 2 and record["seed"] == synthbirds.SYNTHBIRDS_DEFAULTS["seed"]
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(ProtobenchError, match=r"classes = 3 \(folder has 2\).*new folder"):
        synthbirds.ensure_synthbirds(out, {"classes": 3, "image_size": 64})
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # a user's data is never overwritten
    assert synthbirds.ensure_synthbirds(out, {}) == out  # no explicit arguments: the folder as it is
    assert synthbirds.ensure_synthbirds(out, {"classes": 2}) == out


def test_make_data_command_fills_unset_options_from_the_defaults(tmp_path: Path, capsys) -> None:
    from benchmark.cli import main

    out = tmp_path / "sb"
    assert main(["make-data", "synthbirds", "--out", str(out), "--classes", "2", "--images-per-class", "3"]) == 0
    assert f"2 classes × 3 images, seed {synthbirds.SYNTHBIRDS_DEFAULTS['seed']}) to {out}" in capsys.readouterr().out
    record = synthbirds._marker(out)
    assert record is not None
    assert {k: record[k] for k in synthbirds.SYNTHBIRDS_DEFAULTS} == {**synthbirds.SYNTHBIRDS_DEFAULTS,
                                                                       "classes": 2, "images_per_class": 3}
    assert main(["make-data", "birdz", "--out", str(tmp_path / "x")]) == 2
    assert "unknown generator 'birdz'" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_interrupted_generation_leaves_nothing_that_looks_complete(tmp_path: Path, monkeypatch) -> None:
    calls = []
    draw = synthbirds.draw_bird

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return draw(*args, **kwargs)

    monkeypatch.setattr(synthbirds, "draw_bird", failing)
    with pytest.raises(KeyboardInterrupt):
        generate_synthbirds(tmp_path / "sb", classes=2, images_per_class=2, seed=0)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ProtobenchError, match="not a folder"):
        load_dataset("synthbirds", tmp_path / "sb", "train")


@pytest.mark.parametrize(
    "kwargs",
    [dict(classes=0, images_per_class=2, seed=0), dict(classes=2, images_per_class=0, seed=0),
     dict(classes=2, images_per_class=2, seed=-1), dict(classes=2, images_per_class=2, seed=0, image_size=32)],
)
def test_rejects_bad_arguments(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(ProtobenchError, match="generate_synthbirds"):
        generate_synthbirds(tmp_path / "sb", **kwargs)


def test_a_concurrent_identical_generation_is_kept(tmp_path: Path, monkeypatch) -> None:
    """Two jobs generating the same missing dataset: the second to finish keeps the first's files."""
    out = tmp_path / "sb"
    write = synthbirds._write_dataset
    raced = []

    def racing(*args, **kwargs):
        if not raced:
            raced.append(1)
            generate_synthbirds(out, classes=2, images_per_class=2, seed=0)  # the other job finishes first
            raced.append((out / "images.txt").stat().st_mtime_ns)
        return write(*args, **kwargs)

    monkeypatch.setattr(synthbirds, "_write_dataset", racing)
    generate_synthbirds(out, classes=2, images_per_class=2, seed=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sb"]
    assert len(load_dataset("synthbirds", out, "train")) == 2
    assert (out / "images.txt").stat().st_mtime_ns == raced[1]
