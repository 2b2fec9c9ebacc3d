"""Drawing one stylised bird (``synthbirds``, and the generated NABirds and PartImageNet sets):
body, head, crown cap, beak, eye, wing, tail and leg as PIL polygons on a cluttered background,
with a layer map of which part each pixel shows and the keypoints of the drawn shapes.

Class identity is carried by part appearance only (:mod:`benchmark.data.bird_classes`): colours of
crown, wing, breast and tail, beak colour and length, tail shape and wing/breast texture. Body/head
colour, leg colour, pose (rotation, horizontal flip, scale, position) and the background (smooth
noise, desaturated clutter shapes, an optional perch) are drawn per image independently of the
class. The bird is drawn facing right before the flip, so its right side faces the viewer: the
right eye, wing and leg are drawn and visible, the left ones are hidden; flipping swaps the sides.
A keypoint is visible iff it lies in the image and the pixel it truncates to shows its own part
(not occluded, not cut off by the border). Drawing is deterministic in its numpy ``Generator``.
"""
from __future__ import annotations

import colorsys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from benchmark.data.bird_classes import LEG_COLOURS, RGB, BirdClass


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


def _background(size: int, rng: np.random.Generator, omit_clutter: int | None = None) -> tuple[Image.Image, Image.Image, int]:
    """Smooth low-saturation noise, fine grain, and class-independent desaturated clutter; with the
    clutter map (``L``: 0 none, i + 1 where clutter shape i is the topmost) and the number of clutter
    shapes. ``omit_clutter``: the
    shape not drawn (its random draws still taken, so everything else is unchanged)."""
    base = np.array(_hsv(rng.random(), rng.uniform(0.0, 0.2), rng.uniform(0.35, 0.9)), dtype=np.float64)
    low = Image.fromarray(np.clip(base + rng.normal(0.0, 20.0, (4, 4, 3)), 0, 255).astype(np.uint8))
    smooth = np.asarray(low.resize((size, size), Image.Resampling.BICUBIC))
    grain = rng.integers(0, 17, (size, size, 3), dtype=np.uint8)  # ±8 grey levels
    image = Image.fromarray(np.clip(smooth, 8, 238) + grain - 8)
    clutter = Image.new("L", (size, size), 0)
    canvases = (ImageDraw.Draw(image), ImageDraw.Draw(clutter))
    shapes = int(rng.integers(3, 9))
    for i in range(shapes):
        colour = _hsv(rng.random(), rng.uniform(0.0, 0.25), rng.uniform(0.2, 0.95))
        x, y = rng.uniform(-0.1, 1.1, 2) * size
        w, h = rng.uniform(0.05, 0.3, 2) * size
        kind = rng.integers(4)
        line_end = width = corners = None
        if kind == 2:
            corners = rng.uniform(-0.15, 0.15, (3, 2)) * size + (x, y)
        elif kind == 3:
            line_end = (x + rng.uniform(-0.5, 0.5) * size, y + rng.uniform(-0.5, 0.5) * size)
            width = int(rng.integers(2, 7))
        if i == omit_clutter:
            continue
        for draw, fill in zip(canvases, (colour, i + 1)):
            if kind == 0:
                draw.ellipse((x, y, x + w, y + h), fill=fill)
            elif kind == 1:
                draw.rectangle((x, y, x + w, y + h), fill=fill)
            elif kind == 2:
                draw.polygon([tuple(p) for p in corners], fill=fill)
            else:
                draw.line((x, y, *line_end), fill=fill, width=width)
    return image, clutter, shapes


@dataclass(frozen=True)
class Drawing:
    """One rendered image with its layer map and keypoints (image coordinates, floats)."""

    image: Image.Image
    layers: np.ndarray  # S×S uint8 layer ids, 0 = background
    keypoints: dict[str, tuple[float, float]]  # near-side names "eye", "wing", "leg"
    flip: bool
    clutter: np.ndarray | None = None  # S×S uint8: i + 1 where background clutter shape i shows, else 0
    clutter_shapes: int = 0  # how many clutter shapes the background draws (visible or not)


def draw_bird(bird: BirdClass, size: int, rng: np.random.Generator, *, omit_layers: frozenset[int] = frozenset(),
              omit_clutter: int | None = None) -> Drawing:
    """One bird. ``omit_layers`` (layer ids) and ``omit_clutter`` (a clutter shape's index) are left
    undrawn with every random draw still taken, so the rest of the image is the same pixels: the
    rendered interventions of ``make-data funnybirds`` (a part or a background object removed)."""
    image, clutter, clutter_count = _background(size, rng, omit_clutter)
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
    drawn_leg = LEG_COLOURS[rng.integers(len(LEG_COLOURS))]
    leg_colour = drawn_leg if bird.leg is None else bird.leg
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
        (_ellipse(canonical["eye"], (0.26 * HEAD_R,) * 2, n=16), bird.eye or (235, 235, 225), EYE),
        (_ellipse(canonical["eye"], (0.17 * HEAD_R,) * 2, n=16), (15, 15, 15), EYE),
    ]

    if rng.random() < 0.5:  # a perch under the foot, class-independent
        foot = pose.apply([FOOT])[0] + (0.0, 0.06 * pose.scale)
        d = _rotation(rng.uniform(-15.0, 15.0)) @ np.array([size, 0.0])
        for canvas, fill in ((image, (100, 70, 40)), (clutter, 0)):  # the perch hides the clutter behind it
            ImageDraw.Draw(canvas).line((*(foot - d), *(foot + d)), fill=fill, width=max(2, int(0.12 * pose.scale)))

    layers = Image.new("L", (size, size), 0)
    draw, draw_layers = ImageDraw.Draw(image), ImageDraw.Draw(layers)
    for polygon, colour, layer in shapes:
        if layer in omit_layers:
            continue
        points = [tuple(p) for p in pose.apply(polygon)]
        draw.polygon(points, fill=colour)
        draw_layers.polygon(points, fill=layer)
    keypoints = {name: tuple(pose.apply([xy])[0]) for name, xy in canonical.items()}
    return Drawing(image=image, layers=np.asarray(layers), keypoints=keypoints, flip=pose.flip,
                   clutter=np.asarray(clutter), clutter_shapes=clutter_count)


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


def part_locations(drawing: Drawing, names: Sequence[str],
                   aliases: Mapping[str, str] | None = None) -> list[tuple[float, float, int]]:
    """``(x, y, visible)`` per part of ``names`` (x, y rounded to 0.1 px; ``(0, 0, 0)`` where hidden,
    as CUB and NABirds write it). A name ``"left KIND"`` / ``"right KIND"`` is the near or far side's
    KIND; ``aliases`` maps a dataset's part name to the drawing's (NABirds' ``bill`` is the beak)."""
    near, far = ("left", "right") if drawing.flip else ("right", "left")
    size = drawing.layers.shape[0]
    out = []
    for part in names:
        side, _, kind = part.rpartition(" ")
        if side == far:
            out.append((0.0, 0.0, 0))
            continue
        key = (aliases or {}).get(kind, kind) if side == near else (aliases or {}).get(part, part)
        x, y = (float(f"{v:.1f}") + 0.0 for v in drawing.keypoints[key])  # + 0.0: no "-0.0"
        col, row = int(x), int(y)
        inside = 0 <= x and 0 <= y and col < size and row < size
        if inside and drawing.layers[row, col] in PART_LAYERS[key]:
            out.append((x, y, 1))
        else:
            out.append((0.0, 0.0, 0))
    return out


def tight_box(mask: np.ndarray) -> tuple[float, float, float, float]:
    """Box ``(x, y, width, height)`` of the mask's pixels (CUB's and NABirds' form)."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return float(cols[0]), float(rows[0]), float(cols[-1] - cols[0] + 1), float(rows[-1] - rows[0] + 1)
