"""Reader of the official FunnyBirds layout (:mod:`benchmark.data.funnybirds_layout`; visinf/funnybirds-framework
``datasets/funny_birds.py``): the split as an :class:`ImageDataset` (full images, the alpha channel dropped as
the official ``ToTensor()(image)[:-1]`` does) and :class:`FunnyBirdsSet`, the ground truth the protocols read
(classes' part sets, the parts, the part maps and the rendered interventions).

Everything listed is validated before any compute: the three JSON files (each error names the file
and the item), every image and part map present; :func:`check_funnybirds` (``doctor``; before the
protocols run) also every test intervention present and decodable and every part map's colours in the
official code. Nothing here executes code read from disk (``json`` only).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from benchmark.data import funnybirds_layout as layout
from benchmark.data.dataset import ImageDataset, PartMapFiles, check_images_exist, check_split
from benchmark.errors import ProtobenchError

_FIX = "re-download and extract FunnyBirds, or regenerate it with `protobench make-data funnybirds`"


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise ProtobenchError(f"FunnyBirds file {path} is missing; {_FIX}.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        line = getattr(err, "lineno", None)
        raise ProtobenchError(f"{path}{f', line {line}' if line else ''}: not valid JSON ({err}); {_FIX}.") from None


def _bad(path: Path, item: int | str, why: str) -> ProtobenchError:
    return ProtobenchError(f"{path}, item {item}: {why}; fix that item or {_FIX}.")


@dataclass(frozen=True)
class FunnyBirdsSet:
    """One split's ground truth as read from disk.

    parts        {part: [variant attributes]} (``parts.json``; the official five parts)
    classes      per class k, {part: variant index} (``classes.json``)
    labels       N class indices (``dataset_{split}.json``'s ``class_idx``)
    background   N counts of background objects (the integers of each item's first ``bg_`` key; 0 without one)
    """

    root: Path
    split: str
    parts: dict[str, list[Any]]
    classes: list[dict[str, int]]
    labels: np.ndarray
    background: np.ndarray

    @property
    def part_names(self) -> list[str]:
        return list(self.parts)

    def image_path(self, i: int) -> Path:
        return self.root / self.split / str(int(self.labels[i])) / layout.image_name(i)

    def part_map_path(self, i: int) -> Path:
        return self.root / f"{self.split}_part_map" / str(int(self.labels[i])) / layout.image_name(i)

    def intervention_path(self, i: int, removed: list[str] | tuple[str, ...] | set[str]) -> Path:
        return self._interventions(i) / layout.intervention_name(self.parts, removed)

    def background_path(self, i: int, j: int) -> Path:
        return self._interventions(i) / "background_interventions" / layout.background_intervention_name(j)

    def _interventions(self, i: int) -> Path:
        return self.root / f"{self.split}_interventions" / str(int(self.labels[i])) / f"{i:06d}"

    def part_map(self, i: int) -> np.ndarray:
        """H×W×3 uint8 colours of image ``i``'s part map (alpha dropped)."""
        with Image.open(self.part_map_path(i)) as image:
            return np.asarray(image.convert("RGBA"))[..., :3].copy()


def _background_count(item: dict[str, Any]) -> int:
    """The official ``re.findall(r'\\b\\d+\\b', params[bg_keys[0]])`` count: integers of the first ``bg_`` key."""
    keys = [k for k in item if k.startswith("bg_")]
    if not keys:
        return 0
    return len(re.findall(r"\b\d+\b", str(item[keys[0]])))


def read_funnybirds_set(root: str | Path, split: str) -> FunnyBirdsSet:
    """Read and check the JSON files of one split (module docstring); images are not opened."""
    check_split("funnybirds", split)
    root = Path(root).expanduser()
    parts_file, classes_file, items_file = root / "parts.json", root / "classes.json", root / f"dataset_{split}.json"
    parts = _load_json(parts_file)
    if not isinstance(parts, dict) or not parts or not all(isinstance(v, list) and v for v in parts.values()):
        raise ProtobenchError(f"{parts_file}: must map each part to its non-empty list of variants; {_FIX}.")
    for name in parts:
        if layout.part_of(name) != name:
            raise _bad(parts_file, name, "a part name must be letters only (the official code strips the rest)")
    classes_raw = _load_json(classes_file)
    if not isinstance(classes_raw, list) or not classes_raw:
        raise ProtobenchError(f"{classes_file}: must be a non-empty list of classes; {_FIX}.")
    classes: list[dict[str, int]] = []
    for k, entry in enumerate(classes_raw):
        if not isinstance(entry, dict) or entry.get("class_idx") != k:
            raise _bad(classes_file, k, f"must be an object with \"class_idx\": {k} (classes are listed in index order)")
        given = entry.get("parts")
        if not isinstance(given, dict) or set(given) != set(parts):
            have = sorted(given) if isinstance(given, dict) else "none"
            raise _bad(classes_file, k, f"its part set must name every part of parts.json {sorted(parts)}; it has {have}")
        for part, variant in given.items():
            if not isinstance(variant, int) or isinstance(variant, bool) or not 0 <= variant < len(parts[part]):
                raise _bad(classes_file, k, f"part {part!r} variant {variant!r} is not an index into parts.json's "
                                            f"{len(parts[part])} {part} variants")
        classes.append({p: int(given[p]) for p in parts})
    items = _load_json(items_file)
    if not isinstance(items, list) or not items:
        raise ProtobenchError(f"{items_file}: must be a non-empty list of images; {_FIX}.")
    labels, background = np.zeros(len(items), dtype=np.int64), np.zeros(len(items), dtype=np.int64)
    for i, item in enumerate(items):
        label = item.get("class_idx") if isinstance(item, dict) else None
        if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(classes):
            raise _bad(items_file, i, f"\"class_idx\" must be a class of classes.json (0 to {len(classes) - 1}), "
                                      f"got {label!r}")
        labels[i], background[i] = label, _background_count(item)
        if background[i] > layout.BACKGROUND_OBJECTS:
            raise _bad(items_file, i, f"{background[i]} background objects; the part-map code has "
                                      f"{layout.BACKGROUND_OBJECTS}")
    return FunnyBirdsSet(root=root, split=split, parts=parts, classes=classes, labels=labels, background=background)


def read_funnybirds(root: Path, split: str, *, image_size: int = 224) -> ImageDataset:
    """The split as the suite's dataset: full images in ``dataset_{split}.json`` order, labels its ``class_idx``."""
    truth = read_funnybirds_set(root, split)
    paths = [truth.image_path(i) for i in range(len(truth.labels))]
    check_images_exist(paths, root / f"dataset_{split}.json", _FIX)
    check_images_exist([truth.part_map_path(i) for i in range(len(truth.labels))], root / f"dataset_{split}.json", _FIX)
    map_paths = [truth.part_map_path(i) for i in range(len(truth.labels))]
    return ImageDataset(name="funnybirds", root=truth.root, split=split,
                        class_names=[f"class {k}" for k in range(len(truth.classes))], labels=truth.labels,
                        image_paths=paths, annotations=None, image_size=image_size,
                        part_maps=part_map_files(truth, map_paths),
                        annotation_files=[truth.root / "parts.json", truth.root / "classes.json",
                                          truth.root / f"dataset_{split}.json"])


def part_map_files(truth: FunnyBirdsSet, paths: list[Path]) -> PartMapFiles:
    """The part maps as the suite's part ground truth: the parts of ``parts.json`` (a colour's part is
    its key's letters, ``eye01`` → ``eye``) and the bird's body (:data:`layout.BODY_COLOUR`), so the
    parts' union is the whole bird (docs/protocol/funnybirds.md)."""
    names = [*truth.part_names, "body"]
    colours = {colour: names.index(layout.part_of(key)) for colour, key in layout.COLOURS_TO_PART.items()
               if layout.part_of(key) in names}
    colours[layout.BODY_COLOUR] = names.index("body")
    return PartMapFiles(part_names=names, paths=paths, colours=colours)


def intervention_paths(truth: FunnyBirdsSet, i: int) -> list[Path]:
    """Every rendered intervention of image ``i``: each subset of parts removed, each background object."""
    names = truth.part_names
    subsets = [[p for b, p in enumerate(names) if mask >> b & 1] for mask in range(2 ** len(names))]
    return [*(truth.intervention_path(i, s) for s in subsets),
            *(truth.background_path(i, j) for j in range(int(truth.background[i])))]


def check_funnybirds(root: str | Path, *, deep: bool = False) -> str:
    """Both splits read; every part map decoded and its colours checked against the code; every test
    intervention present, its header read (``deep``: decoded). One error names the first bad file."""
    known = np.array(sorted(layout.known_colours()), dtype=np.int64)
    known_codes = np.sort(known[:, 0] << 16 | known[:, 1] << 8 | known[:, 2])
    counted = []
    for split in ("train", "test"):
        truth = read_funnybirds_set(root, split)
        for i in range(len(truth.labels)):
            path = truth.part_map_path(i)
            try:
                colours = truth.part_map(i).reshape(-1, 3).astype(np.int64)
            except (OSError, SyntaxError, ValueError) as err:
                raise ProtobenchError(f"part map {path} cannot be decoded ({err}); {_FIX}.") from None
            codes = np.unique(colours[:, 0] << 16 | colours[:, 1] << 8 | colours[:, 2])
            unknown = codes[~np.isin(codes, known_codes)]
            if unknown.size:
                c = int(unknown[0])
                raise ProtobenchError(f"part map {path} holds the colour {(c >> 16, c >> 8 & 255, c & 255)}, which is "
                                      f"not in the FunnyBirds part code ({unknown.size} unknown colours); {_FIX}.")
        if split == "test":
            for i in range(len(truth.labels)):
                for path in intervention_paths(truth, i):
                    _check_decodes(path, deep, "intervention image")
        counted.append(len(truth.labels))
    return f"{counted[0]} train / {counted[1]} test images, part maps and test interventions checked"


def _check_decodes(path: Path, deep: bool, what: str) -> None:
    if not path.is_file():
        raise ProtobenchError(f"{what} {path} is missing; {_FIX}.")
    try:
        with Image.open(path) as image:
            if deep:
                image.load()
    except (OSError, SyntaxError, ValueError) as err:
        raise ProtobenchError(f"{what} {path} cannot be decoded ({err}); {_FIX}.") from None
