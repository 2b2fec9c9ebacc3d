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

The classes' appearance is designed in :mod:`benchmark.data.bird_classes`; this module draws
and writes the images. Generation is deterministic (numpy ``Generator`` streams seeded from ``seed``; no global
RNG): the same arguments give byte-identical files.
"""
from __future__ import annotations

import colorsys
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from benchmark.data.bird_classes import LEG_COLOURS, PART_NAMES, RGB, BirdClass, design_classes
from benchmark.errors import ProtobenchError

GENERATOR = "protobench.synthbirds"  # the "generator" field of MARKER
GENERATOR_VERSION = 1
MARKER = "synthbirds.json"
MAX_CLASSES = 1000
SYNTHBIRDS_DEFAULTS: dict[str, int] = {"classes": 10, "images_per_class": 20, "seed": 0, "image_size": 256}


# ---------------------------------------------------------------------------- geometry

# Label-map values of the drawn layers (back to front), and the layers each part may show on.
TAIL, LEG, BODY, BREAST, WING, HEAD, CROWN, BEAK, EYE = range(1, 10)
PART_LAYERS: dict[str, tuple[int, ...]] = {
    "back": (BODY,), "beak": (BEAK,), "belly": (BODY,), "breast": (BREAST,), "crown": (CROWN,),
    "forehead": (HEAD, CROWN), "eye": (EYE,), "leg": (LEG,), "wing": (WING,),
    "nape": (HEAD, CROWN), "tail": (TAIL,), "throat": (HEAD, CROWN),
}

# Canonical geometry, in units of the body half-length, bird facing +x, y pointing down.
BODY_AXES = (1.0, 0.6)
BREAST_C, BREAST_AXES = (0.55, 0.12), (0.4, 0.38)
WING_C, WING_AXES, WING_ANGLE = (-0.25, -0.08), (0.62, 0.28), 8.0
HEAD_C, HEAD_R = (0.95, -0.5), 0.38
HIP, FOOT, LEG_WIDTH = (0.15, 0.5), (0.3, 1.1), 0.13


def _rotation(degrees: float) -> np.ndarray:
    t = np.deg2rad(degrees)
    return np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])


def _ellipse(c: tuple[float, float], axes: tuple[float, float], angle: float = 0.0, n: int = 40) -> np.ndarray:
    t = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    local = np.stack([axes[0] * np.cos(t), axes[1] * np.sin(t)], axis=1)
    return np.asarray(c) + local @ _rotation(angle).T


def _ellipse_band(
    c: tuple[float, float], axes: tuple[float, float], angle: float, axis: int, lo: float, hi: float, n: int = 10
) -> np.ndarray:
    """The part of an ellipse whose normalised coordinate along ``axis`` lies in ``[lo, hi]``."""
    s = np.linspace(lo, hi, n)
    half = np.sqrt(np.clip(1.0 - s**2, 0.0, None))
    along = np.concatenate([s, s[::-1]])
    across = np.concatenate([-half, half[::-1]])
    unit = np.stack([along, across], axis=1) if axis == 0 else np.stack([across, along], axis=1)
    return np.asarray(c) + (unit * np.asarray(axes)) @ _rotation(angle).T


def _thick_line(a: tuple[float, float], b: tuple[float, float], width: float) -> np.ndarray:
    a_, b_ = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = b_ - a_
    normal = np.array([-d[1], d[0]]) / np.linalg.norm(d) * width / 2
    return np.stack([a_ + normal, b_ + normal, b_ - normal, a_ - normal])


def _tail(shape: str) -> np.ndarray:
    if shape == "fan":
        return np.array([(-0.8, -0.15), (-1.75, -0.38), (-1.75, 0.32), (-0.8, 0.15)])
    if shape == "forked":
        return np.array([(-0.8, -0.15), (-1.8, -0.35), (-1.45, 0.0), (-1.8, 0.35), (-0.8, 0.15)])
    return np.array([(-0.8, -0.18), (-1.85, 0.0), (-0.8, 0.18)])


def _crown_cap() -> np.ndarray:
    """Segment of the head circle above the chord at 0.3 r above its centre."""
    t0 = np.arcsin(0.3)
    t = np.linspace(t0, np.pi - t0, 16)
    return np.asarray(HEAD_C) + HEAD_R * np.stack([np.cos(t), -np.sin(t)], axis=1)


def _beak(length: float) -> np.ndarray:
    cx, cy = HEAD_C
    r = HEAD_R
    return np.array([(cx + 0.8 * r, cy - 0.3 * r), (cx + r + length, cy + 0.05 * r), (cx + 0.8 * r, cy + 0.3 * r)])


def _keypoints(bird: BirdClass) -> dict[str, tuple[float, float]]:
    """Canonical keypoints; ``eye``/``wing``/``leg`` are the near (drawn) side."""
    cx, cy = HEAD_C
    r = HEAD_R
    return {
        "back": (-0.3, -0.46),
        "beak": tuple(_beak(bird.beak_length).mean(axis=0)),
        "belly": (-0.05, 0.42),
        "breast": BREAST_C,
        "crown": (cx, cy - 0.7 * r),
        "forehead": (cx + 0.6 * r, cy - 0.5 * r),
        "eye": (cx + 0.35 * r, cy - 0.12 * r),
        "leg": (HIP[0] + 0.67 * (FOOT[0] - HIP[0]), HIP[1] + 0.67 * (FOOT[1] - HIP[1])),
        "wing": WING_C,
        "nape": (cx - 0.7 * r, cy + 0.15 * r),
        "tail": (-1.2, 0.0),
        "throat": (cx + 0.3 * r, cy + 0.75 * r),
    }


@dataclass(frozen=True)
class _Pose:
    """Canonical → image coordinates: mirror (flip), rotate, scale, translate."""

    centre: tuple[float, float]
    scale: float
    angle: float
    flip: bool

    def apply(self, points: np.ndarray) -> np.ndarray:
        p = np.atleast_2d(np.asarray(points, dtype=float)) * (-1.0 if self.flip else 1.0, 1.0)
        return np.asarray(self.centre) + self.scale * p @ _rotation(self.angle).T


# ---------------------------------------------------------------------------- drawing


def _hsv(h: float, s: float, v: float) -> RGB:
    r, g, b = colorsys.hsv_to_rgb(h, s, v)
    return int(r * 255), int(g * 255), int(b * 255)


def _jitter(colour: RGB, rng: np.random.Generator) -> RGB:
    c = np.asarray(colour, dtype=float) * rng.uniform(0.85, 1.1) + rng.normal(0.0, 8.0, 3)
    return tuple(int(v) for v in np.clip(c, 0, 255))


def _pattern_colour(colour: RGB) -> RGB:
    luminance = 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2]
    return (20, 20, 20) if luminance > 110 else (240, 240, 240)


def _background(size: int, rng: np.random.Generator) -> Image.Image:
    """Smooth low-saturation noise, fine grain, and class-independent desaturated clutter."""
    base = np.array(_hsv(rng.random(), rng.uniform(0.0, 0.2), rng.uniform(0.35, 0.9)), dtype=np.float64)
    low = Image.fromarray(np.clip(base + rng.normal(0.0, 20.0, (4, 4, 3)), 0, 255).astype(np.uint8))
    smooth = np.asarray(low.resize((size, size), Image.Resampling.BICUBIC))
    grain = rng.integers(0, 17, (size, size, 3), dtype=np.uint8)  # ±8 grey levels
    image = Image.fromarray(np.clip(smooth, 8, 238) + grain - 8)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 9))):
        colour = _hsv(rng.random(), rng.uniform(0.0, 0.25), rng.uniform(0.2, 0.95))
        x, y = rng.uniform(-0.1, 1.1, 2) * size
        w, h = rng.uniform(0.05, 0.3, 2) * size
        kind = rng.integers(4)
        if kind == 0:
            draw.ellipse((x, y, x + w, y + h), fill=colour)
        elif kind == 1:
            draw.rectangle((x, y, x + w, y + h), fill=colour)
        elif kind == 2:
            corners = rng.uniform(-0.15, 0.15, (3, 2)) * size + (x, y)
            draw.polygon([tuple(p) for p in corners], fill=colour)
        else:
            draw.line((x, y, x + rng.uniform(-0.5, 0.5) * size, y + rng.uniform(-0.5, 0.5) * size),
                      fill=colour, width=int(rng.integers(2, 7)))
    return image


@dataclass(frozen=True)
class _Drawing:
    """One rendered image with its layer map and keypoints (image coordinates, floats)."""

    image: Image.Image
    layers: np.ndarray  # S×S uint8 layer ids, 0 = background
    keypoints: dict[str, tuple[float, float]]  # near-side names "eye", "wing", "leg"
    flip: bool


def _draw_bird(bird: BirdClass, size: int, rng: np.random.Generator) -> _Drawing:
    image = _background(size, rng)
    spread = 0.38 if rng.random() < 0.2 else 0.2  # sometimes near the border, so parts are cut off
    pose = _Pose(
        centre=tuple(rng.uniform(0.5 - spread, 0.5 + spread, 2) * size),
        scale=float(rng.uniform(0.12, 0.18) * size),
        angle=float(rng.uniform(-30.0, 30.0)),
        flip=bool(rng.random() < 0.5),
    )
    body = _hsv(rng.random(), rng.uniform(0.05, 0.25), rng.uniform(0.45, 0.8))
    colours = {
        "crown": _jitter(bird.crown, rng), "wing": _jitter(bird.wing, rng), "breast": _jitter(bird.breast, rng),
        "tail": _jitter(bird.tail, rng), "beak": _jitter(bird.beak, rng),
    }
    leg_colour = LEG_COLOURS[rng.integers(len(LEG_COLOURS))]
    canonical = _keypoints(bird)

    # (polygon in canonical units, colour, layer), back to front.
    shapes: list[tuple[np.ndarray, RGB, int]] = [
        (_tail(bird.tail_shape), colours["tail"], TAIL),
        (_thick_line(HIP, FOOT, LEG_WIDTH), leg_colour, LEG),
        (_thick_line((FOOT[0] - 0.15, FOOT[1]), (FOOT[0] + 0.2, FOOT[1]), 0.07), leg_colour, LEG),
        (_ellipse((0.0, 0.0), BODY_AXES), body, BODY),
        (_ellipse(BREAST_C, BREAST_AXES), colours["breast"], BREAST),
    ]
    shapes += _texture(bird.breast_pattern, BREAST_C, BREAST_AXES, 0.0, 1, colours["breast"], BREAST, rng)
    shapes.append((_ellipse(WING_C, WING_AXES, WING_ANGLE), colours["wing"], WING))
    shapes += _texture(bird.wing_pattern, WING_C, WING_AXES, WING_ANGLE, 0, colours["wing"], WING, rng)
    shapes += [
        (_ellipse(HEAD_C, (HEAD_R, HEAD_R), n=32), body, HEAD),
        (_crown_cap(), colours["crown"], CROWN),
        (_beak(bird.beak_length), colours["beak"], BEAK),
        (_ellipse(canonical["eye"], (0.26 * HEAD_R,) * 2, n=16), (235, 235, 225), EYE),
        (_ellipse(canonical["eye"], (0.17 * HEAD_R,) * 2, n=16), (15, 15, 15), EYE),
    ]

    if rng.random() < 0.5:  # a perch under the foot, class-independent
        foot = pose.apply([FOOT])[0] + (0.0, 0.06 * pose.scale)
        d = _rotation(rng.uniform(-15.0, 15.0)) @ np.array([size, 0.0])
        ImageDraw.Draw(image).line((*(foot - d), *(foot + d)), fill=(100, 70, 40), width=max(2, int(0.12 * pose.scale)))

    layers = Image.new("L", (size, size), 0)
    draw, draw_layers = ImageDraw.Draw(image), ImageDraw.Draw(layers)
    for polygon, colour, layer in shapes:
        points = [tuple(p) for p in pose.apply(polygon)]
        draw.polygon(points, fill=colour)
        draw_layers.polygon(points, fill=layer)
    keypoints = {name: tuple(pose.apply([xy])[0]) for name, xy in canonical.items()}
    return _Drawing(image=image, layers=np.asarray(layers), keypoints=keypoints, flip=pose.flip)


def _texture(
    pattern: str,
    c: tuple[float, float],
    axes: tuple[float, float],
    angle: float,
    stripe_axis: int,
    colour: RGB,
    layer: int,
    rng: np.random.Generator,
) -> list[tuple[np.ndarray, RGB, int]]:
    """Stripes (three bands across ``stripe_axis``) or dots inside an ellipse-shaped part."""
    ink = _pattern_colour(colour)
    if pattern == "stripes":
        return [(_ellipse_band(c, axes, angle, stripe_axis, lo, lo + 0.2), ink, layer) for lo in (-0.55, -0.1, 0.35)]
    if pattern == "dots":
        dots = []
        for _ in range(int(rng.integers(5, 9))):
            radius, t = 0.6 * np.sqrt(rng.random()), rng.uniform(0, 2 * np.pi)
            centre = np.asarray(c) + (np.array([np.cos(t), np.sin(t)]) * radius * axes) @ _rotation(angle).T
            dots.append((_ellipse(tuple(centre), (0.06, 0.06), n=10), ink, layer))
        return dots
    return []


# ---------------------------------------------------------------------------- annotations


def _part_locations(drawing: _Drawing) -> list[tuple[float, float, int]]:
    """``(x, y, visible)`` per CUB part, as written to part_locs.txt (x, y rounded to 0.1 px)."""
    near, far = ("left", "right") if drawing.flip else ("right", "left")
    size = drawing.layers.shape[0]
    out = []
    for part in PART_NAMES:
        side, _, kind = part.rpartition(" ")
        if side == far:
            out.append((0.0, 0.0, 0))
            continue
        key = kind if side == near else part
        x, y = (float(f"{v:.1f}") + 0.0 for v in drawing.keypoints[key])  # + 0.0: no "-0.0"
        col, row = int(x), int(y)
        inside = 0 <= x and 0 <= y and col < size and row < size
        if inside and drawing.layers[row, col] in PART_LAYERS[key]:
            out.append((x, y, 1))
        else:
            out.append((0.0, 0.0, 0))
    return out


def _tight_box(mask: np.ndarray) -> tuple[float, float, float, float]:
    """CUB box ``(x, y, width, height)`` of the mask's pixels."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return float(cols[0]), float(rows[0]), float(cols[-1] - cols[0] + 1), float(rows[-1] - rows[0] + 1)


# ---------------------------------------------------------------------------- writing


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
            drawing = _draw_bird(bird, image_size, np.random.default_rng([seed, 1, image_id]))
            stem = f"{bird.name}_{j + 1:04d}_{image_id}"
            drawing.image.save(out / "images" / class_dir / f"{stem}.jpg", quality=95)
            mask = drawing.layers > 0
            Image.fromarray(mask.astype(np.uint8) * 255).save(out / "segmentations" / class_dir / f"{stem}.png")
            x, y, w, h = _tight_box(mask)
            lines["images.txt"].append(f"{image_id} {class_dir}/{stem}.jpg")
            lines["image_class_labels.txt"].append(f"{image_id} {k}")
            lines["train_test_split.txt"].append(f"{image_id} {1 if j % 2 == 0 else 0}")
            lines["bounding_boxes.txt"].append(f"{image_id} {x:.1f} {y:.1f} {w:.1f} {h:.1f}")
            for p, (px, py, visible) in enumerate(_part_locations(drawing), start=1):
                lines["parts/part_locs.txt"].append(f"{image_id} {p} {px:.1f} {py:.1f} {visible}")
    lines["classes.txt"] = [f"{k} {k:03d}.{b.name}" for k, b in enumerate(birds, start=1)]
    lines["parts/parts.txt"] = [f"{p} {name}" for p, name in enumerate(PART_NAMES, start=1)]
    (out / "parts").mkdir()
    for rel, content in lines.items():
        (out / rel).write_text("".join(f"{line}\n" for line in content), encoding="utf-8")


def _marker(out: Path) -> dict | None:
    """The generation record of a previous synthbirds output in ``out``, if readable and this generator's."""
    try:
        record = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("generator") == GENERATOR else None


def generate_synthbirds(
    out: str | Path, *, classes: int, images_per_class: int, seed: int, image_size: int = 256
) -> Path:
    """Write ``synthbirds`` to ``out`` in the CUB layout and return ``out``.

    The 1st, 3rd, 5th, … image of each class are training images, the others test images. The dataset is built in a temporary sibling folder and renamed into place with
    ``synthbirds.json`` inside, so an interrupted run never leaves a folder that looks
    complete. If ``out`` already holds synthbirds output made with the same arguments it is
    returned unchanged; other synthbirds output there is replaced; any other non-empty
    folder is refused. A killed run can leave a hidden ``.<name>.partial-*`` folder next to
    ``out``; it is never read and may be deleted.
    """
    for arg, value, low in (("classes", classes, 1), ("images_per_class", images_per_class, 1),
                            ("seed", seed, 0), ("image_size", image_size, 64)):
        if not isinstance(value, (int, np.integer)) or value < low:
            raise ProtobenchError(f"generate_synthbirds: {arg} must be an integer >= {low}, got {value!r}.")
    if classes > MAX_CLASSES:
        raise ProtobenchError(f"generate_synthbirds: classes must be at most {MAX_CLASSES}, got {classes}.")
    out = Path(out).resolve()
    record = {"generator": GENERATOR, "version": GENERATOR_VERSION, "classes": int(classes),
              "images_per_class": int(images_per_class), "seed": int(seed), "image_size": int(image_size)}
    if out.exists():
        if not out.is_dir():
            raise ProtobenchError(f"{out} is a file, not a folder; choose a new or empty folder for synthbirds.")
        if any(out.iterdir()):
            previous = _marker(out)
            if previous is None:
                raise ProtobenchError(
                    f"{out} is not empty and is not a synthbirds dataset (no valid {MARKER}); "
                    f"choose a new or empty folder."
                )
            if previous == record:
                return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp, old = out.with_name(f".{out.name}.partial-{tag}"), out.with_name(f".{out.name}.old-{tag}")
    tmp.mkdir()
    try:
        _write_dataset(tmp, classes, images_per_class, seed, image_size)
        (tmp / MARKER).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        if out.exists() and _marker(out) != record:  # another process may have finished the same dataset
            os.replace(out, old)
        if not out.exists():
            os.replace(tmp, out)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
    return out


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
