"""The official FunnyBirds layout (Hesse, Schaub-Meyer and Roth, ICCV 2023; visinf/funnybirds-framework
``datasets/funny_birds.py``), as data: file names, the part-map colour code and the intervention
file names. Read by :mod:`benchmark.data.funnybirds`, written by :mod:`benchmark.data.synthetic_funnybirds`.

Under the dataset root::

    dataset_{train,test}.json   a list; item i: the render parameters of image i, with "class_idx"
                                and one "bg_…" key whose integers are the background objects
    classes.json                a list; item k: {"class_idx": k, "parts": {part: variant index}}
    parts.json                  {part: [variant attributes, …]} (the official five: beak, eye, foot, tail, wing)
    {split}/{class}/{i:06d}.png           image i (RGBA; the alpha channel is dropped)
    {split}_part_map/{class}/{i:06d}.png  its part map in the colour code below
    test_interventions/{class}/{i:06d}/body_{kept parts, sorted, joined by _}.png
    test_interventions/{class}/{i:06d}/background_interventions/{j}.png   background object j removed
"""
from __future__ import annotations

from collections.abc import Iterable

RGB = tuple[int, int, int]

#: the official decoding from part map to part (``FunnyBirds.colors_to_part``); a part's name is the
#: alphabetic characters of its key (``eye01`` and ``eye02`` are both ``eye``)
COLOURS_TO_PART: dict[RGB, str] = {
    (255, 255, 253): "eye01", (255, 255, 254): "eye02", (255, 255, 0): "beak", (255, 0, 1): "foot01",
    (255, 0, 2): "foot02", (0, 255, 1): "wing01", (0, 255, 2): "wing02", (0, 0, 255): "tail",
}
BACKGROUND_COLOUR: RGB = (0, 0, 0)  # FunnyBirds.bg_color
#: background object j is (204, 204, 204 + j), j < 50 (``explainer_wrapper.get_part_importance``, with_bg)
BACKGROUND_OBJECTS = 50
#: the bird's body (head, torso) in the part map: the official code names no colour for it; this
#: suite writes and accepts white (docs/protocol/funnybirds.md, "Protocol deviations")
BODY_COLOUR: RGB = (255, 255, 255)
PART_NAMES: tuple[str, ...] = ("beak", "eye", "foot", "tail", "wing")  # the official parts.json keys


def part_of(key: str) -> str:
    """``eye01`` → ``eye``: the official code keeps a key's alphabetic characters."""
    return "".join(c for c in key if c.isalpha())


def background_object_colour(j: int) -> RGB:
    return (204, 204, 204 + j)


def background_key(j: int) -> str:
    """The official name of background object j in part importances (``bg_000``, …)."""
    return f"bg_{j:03d}"


def known_colours() -> set[RGB]:
    """Every colour a part map may hold."""
    return {*COLOURS_TO_PART, BACKGROUND_COLOUR, BODY_COLOUR,
            *(background_object_colour(j) for j in range(BACKGROUND_OBJECTS))}


def image_name(index: int) -> str:
    return f"{index:06d}.png"


def intervention_name(parts: Iterable[str], removed: Iterable[str]) -> str:
    """The file of the intervention that removes ``removed`` (``FunnyBirds.get_intervention``)."""
    kept = sorted(set(parts) - set(removed))
    return "body_" + "_".join(kept) + ".png"


def background_intervention_name(j: int) -> str:
    return f"{j}.png"
