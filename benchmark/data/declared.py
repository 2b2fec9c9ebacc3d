"""What each dataset declares, as data that imports no torch: its name, display name, reader
module, layout, classes, official split sizes and which annotations it has (docs/protocol/harness.md,
"Datasets"). Grid validation, ``plan`` and the docs' reference read these; the readers
(``benchmark.data.cub``, …) load images to build a cache or train."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetDeclaration:
    """``classes`` and ``split_images`` (train, test) are the official counts (0 and (0, 0) for the
    generated synthbirds, whose counts come from its ``dataset_args``); ``parts``: part keypoints
    (consistency and stability need them); ``cub_layout``: files in CUB-200-2011's layout."""

    name: str
    display_name: str
    reader: str
    classes: int
    split_images: tuple[int, int]
    parts: bool
    cub_layout: bool


DATASETS: dict[str, DatasetDeclaration] = {
    d.name: d
    for d in (
        DatasetDeclaration("cub", "CUB-200-2011", "benchmark.data.cub", 200, (5994, 5794), parts=True, cub_layout=True),
        DatasetDeclaration("synthbirds", "synthbirds (generated)", "benchmark.data.synthbirds", 0, (0, 0), parts=True,
                           cub_layout=True),
        DatasetDeclaration("dogs", "Stanford Dogs", "benchmark.data.dogs", 120, (12000, 8580), parts=False,
                           cub_layout=False),
        DatasetDeclaration("cars", "Stanford Cars", "benchmark.data.cars", 196, (8144, 8041), parts=False,
                           cub_layout=False),
    )
}
