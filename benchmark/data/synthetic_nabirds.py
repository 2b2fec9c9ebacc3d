"""``make-data nabirds``: a small synthetic set in the exact NABirds layout, for tests and demos.

The birds of ``synthbirds`` (:mod:`benchmark.data.bird_drawing`, classes from
:mod:`benchmark.data.bird_classes`), written as NABirds writes its files (read by
:mod:`benchmark.data.nabirds`): UUID image ids, images under ``images/<class id, 4 digits>/``,
integer boxes and keypoints, ``sizes.txt``, and a class hierarchy: the root ``0 Birds``, one family
per two classes (ids 1, 2, …) and the classes as its leaves (ids 100, 101, …). The 11 NABirds
parts (bill, crown, nape, left/right eye, belly, breast, back, tail, left/right wing, ids 0–10) are
points of the drawn shapes, hidden (``0 0 0``) where the far side or an occluding part covers them.
The 1st, 3rd, 5th, … image of each class are training images, the others test images. Generation
is deterministic: the same arguments give byte-identical files.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from benchmark.data.bird_classes import design_classes
from benchmark.data.bird_drawing import draw_bird, part_locations, tight_box
from benchmark.data.generated import Generator, generate_set

GENERATOR = "protobench.nabirds"
GENERATOR_VERSION = 1
MARKER = "generated-nabirds.json"
MAX_CLASSES = 1000
FIRST_LEAF_ID = 100  # class ids of the leaves (the root is 0, families 1, 2, …)
NABIRDS_DEFAULTS: dict[str, int] = {"classes": 4, "images_per_class": 4, "seed": 0, "image_size": 96}
NABIRDS_PARTS: tuple[str, ...] = ("bill", "crown", "nape", "left eye", "right eye", "belly", "breast", "back",
                                  "tail", "left wing", "right wing")  # NABirds' parts/parts.txt, ids 0-10
DRAWN_AS = {"bill": "beak"}  # NABirds' part name -> the drawing's keypoint


def _write_dataset(out: Path, classes: int, images_per_class: int, seed: int, image_size: int) -> None:
    birds = design_classes(classes, np.random.default_rng([seed, 0]))
    ids = np.random.default_rng([seed, 2])
    files = ("images.txt", "image_class_labels.txt", "train_test_split.txt", "bounding_boxes.txt", "sizes.txt",
             "parts/part_locs.txt")
    lines: dict[str, list[str]] = {name: [] for name in files}
    families = (classes + 1) // 2
    lines["classes.txt"] = ["0 Birds", *(f"{f} Synthbird family {f}" for f in range(1, families + 1))]
    lines["hierarchy.txt"] = [f"{f} 0" for f in range(1, families + 1)]
    number = 0
    for k, bird in enumerate(birds):
        leaf = FIRST_LEAF_ID + k
        lines["classes.txt"].append(f"{leaf} {bird.name}")
        lines["hierarchy.txt"].append(f"{leaf} {k // 2 + 1}")
        (out / "images" / f"{leaf:04d}").mkdir(parents=True)
        for j in range(images_per_class):
            number += 1
            image_id = uuid.UUID(bytes=ids.bytes(16), version=4)
            drawing = draw_bird(bird, image_size, np.random.default_rng([seed, 1, number]))
            rel = f"{leaf:04d}/{image_id.hex}.jpg"
            drawing.image.save(out / "images" / rel, quality=95)
            x, y, w, h = (int(v) for v in tight_box(drawing.layers > 0))
            lines["images.txt"].append(f"{image_id} {rel}")
            lines["image_class_labels.txt"].append(f"{image_id} {leaf}")
            lines["train_test_split.txt"].append(f"{image_id} {1 if j % 2 == 0 else 0}")
            lines["bounding_boxes.txt"].append(f"{image_id} {x} {y} {w} {h}")
            lines["sizes.txt"].append(f"{image_id} {image_size} {image_size}")
            for p, (px, py, visible) in enumerate(part_locations(drawing, NABIRDS_PARTS, DRAWN_AS)):
                lines["parts/part_locs.txt"].append(f"{image_id} {p} {int(px)} {int(py)} {visible}")
    lines["parts/parts.txt"] = [f"{p} {name}" for p, name in enumerate(NABIRDS_PARTS)]
    (out / "parts").mkdir()
    for rel, content in lines.items():
        (out / rel).write_text("".join(f"{line}\n" for line in content), encoding="utf-8")


def generate_nabirds(out: str | Path, *, classes: int, images_per_class: int, seed: int,
                     image_size: int = NABIRDS_DEFAULTS["image_size"]) -> Path:
    """Write the synthetic NABirds set to ``out`` (as :mod:`benchmark.data.generated` writes a
    generated folder, with ``generated-nabirds.json`` inside) and return ``out``."""
    generator = Generator(GENERATOR, GENERATOR_VERSION, "generate_nabirds", "generated NABirds", MARKER, MAX_CLASSES, _write_dataset)
    return generate_set(out, generator, classes=classes, images_per_class=images_per_class, seed=seed,
                        image_size=image_size)
