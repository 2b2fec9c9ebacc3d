"""The classes of ``synthbirds`` (:mod:`benchmark.data.synthbirds`): the CUB part names and the
appearance of each class (colours of crown, wing, breast and tail from a palette of well separated
hues, any two classes differing in at least one; beak colour and length, tail shape, texture),
designed from a seeded generator. Drawing and writing the images: :mod:`benchmark.data.synthbirds`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PART_NAMES: tuple[str, ...] = (
    "back", "beak", "belly", "breast", "crown", "forehead", "left eye", "left leg",
    "left wing", "nape", "right eye", "right leg", "right wing", "tail", "throat",
)  # CUB's parts/parts.txt order

RGB = tuple[int, int, int]
PALETTE: tuple[RGB, ...] = (
    (215, 25, 28),  # red
    (245, 130, 20),  # orange
    (250, 215, 30),  # yellow
    (35, 160, 60),  # green
    (0, 190, 200),  # cyan
    (35, 70, 210),  # blue
    (125, 50, 190),  # purple
    (225, 40, 160),  # magenta
    (245, 245, 240),  # white
    (25, 25, 30),  # black
)
BEAK_COLOURS: tuple[RGB, ...] = ((240, 170, 20), (30, 30, 30), (200, 40, 40), (150, 150, 150))
LEG_COLOURS: tuple[RGB, ...] = ((70, 60, 55), (200, 120, 60), (200, 150, 140))
BEAK_LENGTHS: tuple[float, ...] = (0.22, 0.42, 0.65)
TAIL_SHAPES: tuple[str, ...] = ("fan", "forked", "pointed")
PATTERNS: tuple[str, ...] = ("plain", "stripes", "dots")



@dataclass(frozen=True)
class BirdClass:
    """What makes a class: part colours, textures and shapes (see the module docstring)."""

    name: str
    crown: RGB
    wing: RGB
    breast: RGB
    tail: RGB
    beak: RGB
    beak_length: float
    tail_shape: str
    wing_pattern: str
    breast_pattern: str
    eye: RGB | None = None  # iris colour (None: the shared white); make-data funnybirds gives each class one
    leg: RGB | None = None  # leg colour (None: drawn per image); make-data funnybirds gives each class one


def class_suffix(k: int) -> str:
    """0 → 'a', 25 → 'z', 26 → 'aa', … (spreadsheet-column style)."""
    letters = ""
    k += 1
    while k:
        k, r = divmod(k - 1, 26)
        letters = chr(ord("a") + r) + letters
    return letters


def _colour_codes(classes: int, rng: np.random.Generator) -> np.ndarray:
    """``classes`` distinct 4-tuples of palette indices (crown, wing, breast, tail), greedily
    keeping the largest pairwise Hamming distance the number of classes allows."""
    n = len(PALETTE)
    grid = np.stack(np.meshgrid(*[np.arange(n)] * 4, indexing="ij"), axis=-1).reshape(-1, 4)
    grid = grid[rng.permutation(len(grid))]
    chosen: list[np.ndarray] = []
    taken = np.zeros(len(grid), dtype=bool)
    for min_distance in (4, 3, 2, 1):
        for k, code in enumerate(grid):
            if len(chosen) == classes:
                return np.array(chosen)
            if taken[k]:
                continue
            if not chosen or (np.array(chosen) != code).sum(axis=1).min() >= min_distance:
                chosen.append(code)
                taken[k] = True
    return np.array(chosen)


def design_classes(classes: int, rng: np.random.Generator) -> list[BirdClass]:
    """The appearance of each class, drawn once per dataset."""
    codes = _colour_codes(classes, rng)
    out = []
    for k, (crown, wing, breast, tail) in enumerate(codes):
        out.append(
            BirdClass(
                name=f"Synthbird_{class_suffix(k)}",
                crown=PALETTE[crown],
                wing=PALETTE[wing],
                breast=PALETTE[breast],
                tail=PALETTE[tail],
                beak=BEAK_COLOURS[rng.integers(len(BEAK_COLOURS))],
                beak_length=BEAK_LENGTHS[rng.integers(len(BEAK_LENGTHS))],
                tail_shape=TAIL_SHAPES[rng.integers(len(TAIL_SHAPES))],
                wing_pattern=PATTERNS[rng.integers(len(PATTERNS))],
                breast_pattern=PATTERNS[rng.integers(len(PATTERNS))],
            )
        )
    return out
