"""`make-data funnybirds` writes the official FunnyBirds layout (the official dataset class, verbatim in
tests/helpers/funnybirds_official.py, reads it), its interventions remove exactly their part's or background
object's pixels, and bad files are named by path (or file and item) before compute."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest
import torch
from PIL import Image

import funnybirds_official as official
from benchmark.cli import main
from benchmark.data import load_dataset
from benchmark.data.funnybirds import check_funnybirds, intervention_paths, read_funnybirds_set
from benchmark.data.funnybirds_layout import PART_NAMES, background_object_colour
from benchmark.data.synthetic_funnybirds import COSET, class_codes, generate_funnybirds
from benchmark.errors import ProtobenchError
from metrics.funnybirds_parts import COLOURS_TO_PART, alpha, class_distance, sensitivity_pair, shared_parts
from tiny_grid import write_tiny_grid


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_funnybirds(tmp_path_factory.mktemp("fb") / "set", classes=9, images_per_class=2, seed=0,
                               image_size=64)


def test_the_official_reader_reads_the_generated_set(dataset: Path) -> None:
    test = official.FunnyBirds(str(dataset), "test", get_part_map=True)
    ours = load_dataset("funnybirds", dataset, "test")
    assert len(test) == len(ours) == 9 and list(test.parts) == list(PART_NAMES)
    for i in range(len(test)):
        sample = test[i]
        assert sample["class_idx"] == ours.labels[i]
        pixels = torch.from_numpy(np.array(ours.load_image(i))).permute(2, 0, 1).float() / 255
        assert torch.equal(sample["image"], pixels)  # our reader drops alpha as ToTensor()[:-1] does
        assert sample["part_map"].shape == (3, 64, 64)
        for removed in ([], ["beak"], ["eye", "wing"], list(PART_NAMES)):
            assert official.FunnyBirds.get_intervention(test, sample["class_idx"], i, removed)["image"].shape == (1, 3, 64, 64)
        bg = [k for k in sample["params"] if k.startswith("bg_")]
        assert len(bg) == 1
        for j in range(len(sample["params"][bg[0]].split(","))):
            test.get_background_intervention(sample["class_idx"], i, j)
    for k in range(9):  # the class design: minimal sufficient sets and a target-sensitivity pair
        assert test.get_minimal_sufficient_part_sets(k) or k == 8  # the official loop gives the last class none
        parts = [c["parts"] for c in test.classes]
        pair = sensitivity_pair(parts, k)
        assert pair is not None
        assert class_distance(parts, k, pair[0]) == class_distance(parts, k, pair[1]) == 3
        assert set(shared_parts(parts, k, pair[0])).isdisjoint(shared_parts(parts, k, pair[1]))


def test_an_intervention_changes_only_its_parts_pixels(dataset: Path) -> None:
    truth = read_funnybirds_set(dataset, "test")
    by_part = {}
    for colour, key in COLOURS_TO_PART.items():
        by_part.setdefault(alpha(key), []).append(colour)
    for i in range(len(truth.labels)):
        part_map = truth.part_map(i)
        original = np.asarray(Image.open(truth.image_path(i)))

        def region(colours):
            return np.any([np.all(part_map == c, axis=-1) for c in colours], axis=0)

        for removed in (["beak"], ["eye"], ["foot"], ["tail"], ["wing"], ["beak", "tail", "wing"]):
            changed = np.any(np.asarray(Image.open(truth.intervention_path(i, removed))) != original, axis=-1)
            allowed = region([c for p in removed for c in by_part[p]])
            assert not (changed & ~allowed).any() and changed.any() == allowed.any()
        assert np.array_equal(np.asarray(Image.open(truth.intervention_path(i, []))), original)
        for j in range(int(truth.background[i])):
            changed = np.any(np.asarray(Image.open(truth.background_path(i, j))) != original, axis=-1)
            assert not (changed & ~region([background_object_colour(j)])).any()


def test_generation_is_deterministic_and_classes_are_whole_cosets(tmp_path: Path) -> None:
    def digest(folder: Path) -> str:
        h = hashlib.sha256()
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                h.update(str(path.relative_to(folder)).encode() + path.read_bytes())
        return h.hexdigest()

    a = generate_funnybirds(tmp_path / "a", classes=9, images_per_class=2, seed=5, image_size=64)
    b = generate_funnybirds(tmp_path / "b", classes=9, images_per_class=2, seed=5, image_size=64)
    assert digest(a) == digest(b)
    codes = class_codes(27, np.random.default_rng(0))
    assert len({tuple(c) for c in codes}) == 27
    with pytest.raises(ProtobenchError, match="multiple of 9"):
        generate_funnybirds(tmp_path / "c", classes=10, images_per_class=2, seed=0)
    assert COSET == 9 and not (tmp_path / "c").exists()


def _copy(dataset: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(dataset, tmp_path / "copy"))


def test_bad_files_are_named_before_compute(dataset: Path, tmp_path: Path) -> None:
    data = _copy(dataset, tmp_path)
    truth = read_funnybirds_set(data, "test")
    assert "test interventions checked" in check_funnybirds(data, deep=True)
    missing = intervention_paths(truth, 3)[7]
    missing.unlink()
    with pytest.raises(ProtobenchError, match=f"intervention image {missing} is missing"):
        check_funnybirds(data)
    missing.write_bytes(b"not a png")
    with pytest.raises(ProtobenchError, match=f"intervention image {missing} cannot be decoded"):
        check_funnybirds(data)
    missing.unlink()
    Image.open(truth.intervention_path(3, [])).save(missing)
    part_map = truth.part_map_path(2)
    pixels = np.asarray(Image.open(part_map)).copy()
    pixels[0, 0, :3] = (12, 34, 56)
    Image.fromarray(pixels).save(part_map)
    with pytest.raises(ProtobenchError, match=rf"part map {part_map} holds the colour \(12, 34, 56\)"):
        check_funnybirds(data)
    classes = json.loads((data / "classes.json").read_text())
    del classes[4]["parts"]["tail"]
    (data / "classes.json").write_text(json.dumps(classes))
    with pytest.raises(ProtobenchError, match=r"classes.json, item 4: its part set must name every part"):
        load_dataset("funnybirds", data, "train")
    (data / "classes.json").write_text("[{\"class_idx\": 0,\n")
    with pytest.raises(ProtobenchError, match=r"classes.json, line 2: not valid JSON"):
        load_dataset("funnybirds", data, "train")


def test_make_data_and_doctor_through_the_cli(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    data = tmp_path / "funnybirds"
    assert main(["make-data", "funnybirds", "--out", str(data), "--images-per-class", "2"]) == 0
    assert f"wrote funnybirds (9 classes × 2 images, seed 0) to {data}" in capsys.readouterr().out
    grid = write_tiny_grid(tmp_path / "grid.toml", "funnybirds", data, dataset="funnybirds", method="kmex",
                           device="cpu", without=("dataset_args",))
    assert main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert f"[  ok] data funnybirds {data}: 9 train / 9 test images listed, every image's header read; 9 train / " \
           "9 test images, part maps and test interventions checked" in out, out
    victim = read_funnybirds_set(data, "test").background_path(0, 1)
    victim.unlink()
    assert main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache")]) == 1
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("[fail] data funnybirds")]
    assert f"intervention image {victim} is missing" in line, line


def test_run_decodes_every_intervention_before_compute(dataset: Path, tmp_path: Path) -> None:
    """A truncated intervention passes a header read (doctor) but not the run's check (benchmark.run.prepare)."""
    from benchmark.run.prepare import check_data
    from tiny_grid import tiny_grid_table
    from benchmark.grid import parse_grid

    data = _copy(dataset, tmp_path)
    victim = read_funnybirds_set(data, "test").intervention_path(2, ["tail"])
    victim.write_bytes(victim.read_bytes()[:200])
    check_funnybirds(data)  # the header still reads
    grid = parse_grid(tiny_grid_table("fb", data, dataset="funnybirds", without=("dataset_args",)), source="test")
    with pytest.raises(ProtobenchError, match=f"intervention image {victim} cannot be decoded"):
        check_data(grid.runs[0])


def test_part_maps_give_the_part_truth_of_the_suite_metrics(dataset: Path) -> None:
    # the suite's part metrics (consistency, stability, ...) read FunnyBirds' part maps as part masks in the
    # frame; oracle: the source pixel holding each frame pixel's centre, decoded by hand
    from benchmark.run.ground_truth import object_masks, part_truth
    from metrics import FRAME_SIZE, PartMasks

    test = load_dataset("funnybirds", dataset, "test")
    truth = part_truth(test)
    assert isinstance(truth, PartMasks)
    names = test.part_maps.part_names
    assert names == [*read_funnybirds_set(dataset, "test").part_names, "body"]
    colour_part = {colour: names.index("".join(c for c in key if c.isalpha())) for colour, key in COLOURS_TO_PART.items()}
    colour_part[(255, 255, 255)] = names.index("body")
    for i in range(len(test)):
        with Image.open(test.part_maps.paths[i]) as image:
            source = np.asarray(image.convert("RGB"))
        height, width = source.shape[:2]
        rows = np.minimum(((np.arange(FRAME_SIZE) + 0.5) * height / FRAME_SIZE).astype(int), height - 1)
        cols = np.minimum(((np.arange(FRAME_SIZE) + 0.5) * width / FRAME_SIZE).astype(int), width - 1)
        frame = source[rows][:, cols]
        expected = np.full((len(names), FRAME_SIZE, FRAME_SIZE), False)
        for colour, part in colour_part.items():
            expected[part] |= np.all(frame == colour, axis=-1)
        got = np.zeros_like(expected)
        planes = truth.planes(slice(i, i + 1))[0].numpy()
        for slot, part in enumerate(truth.slot_parts[i].tolist()):
            if part >= 0:
                got[part] = planes[slot]
        assert np.array_equal(got, expected), f"image {i}"
        assert expected[names.index("beak")].any() and expected[names.index("body")].any()
        # the object mask (comprehensiveness, localisation): the whole bird, body included
        assert np.array_equal(object_masks(test, truth)[i].numpy(), expected.any(axis=0))
