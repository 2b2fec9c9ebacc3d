"""``make-data partimagenet``: a small synthetic set in the exact layout of PartImageNet's
``PartImageNet_Seg`` release, for tests and demos.

The birds of ``synthbirds`` (:mod:`benchmark.data.bird_drawing`), one synset per class (``n90000000``,
``n90000001``, …; not ImageNet's), written as the release writes its files (read by
:mod:`benchmark.data.partimagenet`): ``images/<split>/<wnid>_<n>.JPEG`` and one COCO file per split,
``annotations/<split>/<split>.json``, whose categories are the release's 40 parts (the README's
super-categories and their parts, in its order; ids 0–39) and whose annotations give each visible
Bird part (Head: head, crown, beak and eye; Body: body and breast; Wing; Foot: the leg; Tail) of an
image as the pixels the drawing shows of it: one rectangle polygon per run of the part's pixels in
a row, so the polygons cover exactly the drawn part. Of each class's images, the 4th, 8th, … go to
val, the 2nd, 6th, 10th, … to test, the others to train. Generation is deterministic: the same
arguments give byte-identical files.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.data.bird_classes import design_classes
from benchmark.data.bird_drawing import BEAK, BODY, BREAST, CROWN, EYE, HEAD, LEG, TAIL, WING, draw_bird, tight_box
from benchmark.data.generated import Generator, generate_set
from benchmark.data.partimagenet import RELEASE_SPLITS

GENERATOR = "protobench.partimagenet"
GENERATOR_VERSION = 1
MARKER = "generated-partimagenet.json"
MAX_CLASSES = 1000
PARTIMAGENET_DEFAULTS: dict[str, int] = {"classes": 4, "images_per_class": 4, "seed": 0, "image_size": 96}
#: the release's super-categories and their parts (PartImageNet README), in its order
SUPER_CATEGORIES: dict[str, tuple[str, ...]] = {
    "Quadruped": ("Head", "Body", "Foot", "Tail"), "Biped": ("Head", "Body", "Hand", "Foot", "Tail"),
    "Fish": ("Head", "Body", "Fin", "Tail"), "Bird": ("Head", "Body", "Wing", "Foot", "Tail"),
    "Snake": ("Head", "Body"), "Reptile": ("Head", "Body", "Foot", "Tail"), "Car": ("Body", "Tier", "Side Mirror"),
    "Bicycle": ("Head", "Body", "Seat", "Tier"), "Boat": ("Body", "Sail"),
    "Aeroplane": ("Head", "Body", "Wing", "Engine", "Tail"), "Bottle": ("Body", "Mouth"),
}
CATEGORIES: list[dict[str, Any]] = [{"id": k, "name": f"{group} {part}", "supercategory": group}
                                    for k, (group, part) in enumerate((g, p) for g, parts in SUPER_CATEGORIES.items()
                                                                      for p in parts)]
#: the drawing's layers of each Bird part
BIRD_PARTS: dict[str, tuple[int, ...]] = {"Head": (HEAD, CROWN, BEAK, EYE), "Body": (BODY, BREAST), "Wing": (WING,),
                                          "Foot": (LEG,), "Tail": (TAIL,)}


def release_split(j: int) -> str:
    """Where the class's ``j``-th image (0-based) goes."""
    return "val" if j % 4 == 3 else "test" if j % 2 == 1 else "train"


def row_run_polygons(mask: np.ndarray) -> list[list[int]]:
    """The rectangle ``[x0, x1) × [y, y + 1)`` of every run of set pixels in each row of ``mask``,
    as COCO polygons ``[x0, y, x1, y, x1, y + 1, x0, y + 1]``."""
    polygons = []
    for y, row in enumerate(mask):
        edges = np.flatnonzero(np.diff(np.concatenate([[False], row, [False]]).astype(np.int8)))
        for x0, x1 in zip(edges[::2].tolist(), edges[1::2].tolist()):
            polygons.append([x0, y, x1, y, x1, y + 1, x0, y + 1])
    return polygons


def _write_dataset(out: Path, classes: int, images_per_class: int, seed: int, image_size: int) -> None:
    birds = design_classes(classes, np.random.default_rng([seed, 0]))
    category = {c["name"]: c["id"] for c in CATEGORIES}
    files: dict[str, dict[str, list[Any]]] = {s: {"images": [], "annotations": [], "categories": CATEGORIES}
                                              for s in RELEASE_SPLITS}
    for split in RELEASE_SPLITS:
        (out / "images" / split).mkdir(parents=True)
        (out / "annotations" / split).mkdir(parents=True)
    number = annotation_id = 0
    for k, bird in enumerate(birds):
        wnid = f"n{90_000_000 + k}"
        for j in range(images_per_class):
            number += 1
            drawing = draw_bird(bird, image_size, np.random.default_rng([seed, 1, number]))
            split, name = release_split(j), f"{wnid}_{j + 1}.JPEG"
            drawing.image.save(out / "images" / split / name, format="JPEG", quality=95)
            files[split]["images"].append({"id": number, "file_name": name, "width": image_size,
                                           "height": image_size})
            for part, layers in BIRD_PARTS.items():
                mask = np.isin(drawing.layers, layers)
                if not mask.any():
                    continue
                annotation_id += 1
                files[split]["annotations"].append({
                    "id": annotation_id, "image_id": number, "category_id": category[f"Bird {part}"],
                    "segmentation": row_run_polygons(mask), "area": int(mask.sum()),
                    "bbox": [int(v) for v in tight_box(mask)], "iscrowd": 0})
    for split, content in files.items():
        (out / "annotations" / split / f"{split}.json").write_text(json.dumps(content), encoding="utf-8")


def generate_partimagenet(out: str | Path, *, classes: int, images_per_class: int, seed: int,
                          image_size: int = PARTIMAGENET_DEFAULTS["image_size"]) -> Path:
    """Write the synthetic PartImageNet_Seg set to ``out`` (as :mod:`benchmark.data.generated`
    writes a generated folder, with ``generated-partimagenet.json`` inside) and return ``out``."""
    generator = Generator(GENERATOR, GENERATOR_VERSION, "generate_partimagenet", "generated PartImageNet", MARKER, MAX_CLASSES, _write_dataset)
    return generate_set(out, generator, classes=classes, images_per_class=images_per_class, seed=seed,
                        image_size=image_size)
