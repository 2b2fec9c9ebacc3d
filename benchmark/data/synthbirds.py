"""``synthbirds``: a synthetic bird dataset written to disk in the exact CUB-200-2011 layout.

Every image shows one stylised bird drawn with PIL polygons (body, head, crown cap, beak,
eye, wing, tail, leg) on a cluttered background. The 15 CUB keypoints are points of the
drawn shapes, so they are known exactly; the segmentation mask is the drawn bird and the
box is the mask's tight box. Class identity is carried by part appearance only:

* colours of crown, wing, breast and tail, from a 10-colour palette of well separated
  hues; any two classes differ in the colour of at least one (as many as the number of
  classes allows, up to all four) of these parts, so colour alone separates classes;
* beak colour and length, tail shape (fan, forked, pointed) and wing/breast texture
  (plain, stripes, dots).

Body/head colour, leg colour, pose (rotation, horizontal flip, scale, position) and the
background (smooth noise, desaturated clutter shapes, an optional perch) are drawn per
image independently of the class. The bird is drawn facing right before the flip, so
its right side faces the viewer: the right eye, wing and leg are drawn and visible, the
left ones are hidden (visible = 0, x = y = 0 as in CUB); flipping swaps the sides. A
keypoint is visible iff it lies in the image and the pixel it truncates to shows its own
part (not occluded, not cut off by the border).

The classes' appearance is designed in :mod:`benchmark.data.bird_classes`, the images drawn by
:mod:`benchmark.data.bird_drawing`; this module writes them. Generation is deterministic (numpy
``Generator`` streams seeded from ``seed``; no global RNG): the same arguments give byte-identical
files.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from benchmark.data.bird_classes import PART_NAMES, design_classes
from benchmark.data.bird_drawing import draw_bird, part_locations, tight_box
from benchmark.data.generated import Generator, generate_set, read_marker
from benchmark.errors import ProtobenchError

GENERATOR = "protobench.synthbirds"  # the "generator" field of MARKER
GENERATOR_VERSION = 1
MARKER = "synthbirds.json"
MAX_CLASSES = 1000
SYNTHBIRDS_DEFAULTS: dict[str, int] = {"classes": 10, "images_per_class": 20, "seed": 0, "image_size": 256}


def _write_dataset(out: Path, classes: int, images_per_class: int, seed: int, image_size: int) -> None:
    birds = design_classes(classes, np.random.default_rng([seed, 0]))
    lines: dict[str, list[str]] = {name: [] for name in (
        "images.txt", "image_class_labels.txt", "train_test_split.txt", "bounding_boxes.txt", "parts/part_locs.txt"
    )}
    image_id = 0
    for k, bird in enumerate(birds, start=1):
        class_dir = f"{k:03d}.{bird.name}"
        (out / "images" / class_dir).mkdir(parents=True)
        (out / "segmentations" / class_dir).mkdir(parents=True)
        for j in range(images_per_class):
            image_id += 1
            drawing = draw_bird(bird, image_size, np.random.default_rng([seed, 1, image_id]))
            stem = f"{bird.name}_{j + 1:04d}_{image_id}"
            drawing.image.save(out / "images" / class_dir / f"{stem}.jpg", quality=95)
            mask = drawing.layers > 0
            Image.fromarray(mask.astype(np.uint8) * 255).save(out / "segmentations" / class_dir / f"{stem}.png")
            x, y, w, h = tight_box(mask)
            lines["images.txt"].append(f"{image_id} {class_dir}/{stem}.jpg")
            lines["image_class_labels.txt"].append(f"{image_id} {k}")
            lines["train_test_split.txt"].append(f"{image_id} {1 if j % 2 == 0 else 0}")
            lines["bounding_boxes.txt"].append(f"{image_id} {x:.1f} {y:.1f} {w:.1f} {h:.1f}")
            for p, (px, py, visible) in enumerate(part_locations(drawing, PART_NAMES), start=1):
                lines["parts/part_locs.txt"].append(f"{image_id} {p} {px:.1f} {py:.1f} {visible}")
    lines["classes.txt"] = [f"{k} {k:03d}.{b.name}" for k, b in enumerate(birds, start=1)]
    lines["parts/parts.txt"] = [f"{p} {name}" for p, name in enumerate(PART_NAMES, start=1)]
    (out / "parts").mkdir()
    for rel, content in lines.items():
        (out / rel).write_text("".join(f"{line}\n" for line in content), encoding="utf-8")


def _marker(out: Path) -> dict | None:
    """The generation record of a previous synthbirds output in ``out``, if readable and this generator's."""
    return read_marker(out, MARKER, GENERATOR)


def generate_synthbirds(
    out: str | Path, *, classes: int, images_per_class: int, seed: int, image_size: int = 256
) -> Path:
    """Write ``synthbirds`` to ``out`` in the CUB layout and return ``out``.

    The 1st, 3rd, 5th, … image of each class are training images, the others test images. The
    folder is written as :mod:`benchmark.data.generated` says, with ``synthbirds.json`` inside:
    never a folder that looks complete after an interruption; the same arguments keep an existing
    output; other synthbirds output is replaced; any other non-empty folder is refused.
    """
    generator = Generator(GENERATOR, GENERATOR_VERSION, "generate_synthbirds", "synthbirds", MARKER, MAX_CLASSES, _write_dataset)
    return generate_set(out, generator, classes=classes, images_per_class=images_per_class, seed=seed,
                        image_size=image_size)


def ensure_synthbirds(root: str | Path, dataset_args: dict[str, int]) -> Path:
    """The synthbirds folder a grid names: generated from ``dataset_args`` (over
    :data:`SYNTHBIRDS_DEFAULTS`) when missing. An existing one is used as it is, unless an
    argument the grid sets explicitly differs from how it was made: that is an error, not a
    silent swap of datasets and not an overwrite of a user's ``make-data`` output."""
    root = Path(root).expanduser()
    if not root.exists():
        return generate_synthbirds(root, **{**SYNTHBIRDS_DEFAULTS, **dataset_args})
    previous = _marker(root)
    if previous is None:
        return root  # a synthbirds tree from elsewhere: the CUB reader checks its files
    differs = {k: (previous.get(k), v) for k, v in dataset_args.items() if previous.get(k) != v}
    if differs:
        detail = ", ".join(f"{k} = {v!r} (folder has {old!r})" for k, (old, v) in sorted(differs.items()))
        raise ProtobenchError(
            f"synthbirds folder {root} was generated with other arguments than the grid's dataset_args: "
            f"{detail}. Point data_root at a new folder (it is generated there), delete {root}, "
            "or drop those dataset_args to use the folder as it is.")
    return root
