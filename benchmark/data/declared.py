"""What each dataset declares, as data that imports no torch: its name, display name, reader
module, layout, classes, official split sizes and which annotations it has (docs/protocol/harness.md,
"Datasets"). Grid validation, ``plan`` and the docs' reference read these; the readers
(``benchmark.data.cub``, …) load images to build a cache or train.

An installed package declares a dataset under the entry-point group ``protobench.datasets``: a
:class:`DatasetDeclaration` whose ``loader`` (``module:function``, called as
``loader(root, split, image_size=…)``) returns a ``benchmark.data.dataset.ImageDataset``. A grid
then names it like a built-in; a name clash is refused naming both (methods/plugins.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from methods.plugins import Provider

PLUGIN_GROUP = "protobench.datasets"


@dataclass(frozen=True)
class DatasetDeclaration:
    """``classes`` and ``split_images`` (train, test) are the official counts (0 and (0, 0) for the
    generated synthbirds, whose counts come from its ``dataset_args``; for PartImageNet, whose
    release does not publish its Seg split's sizes, the release's total bounds each split);
    ``parts``: part annotations, keypoints or masks (consistency and stability need them);
    ``cub_layout``: files in CUB-200-2011's layout."""

    name: str
    display_name: str
    reader: str
    classes: int
    split_images: tuple[int, int]
    parts: bool
    cub_layout: bool
    loader: str = ""  # an installed dataset's ``module:function`` (the built-ins' readers are the suite's)


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
        # NABirds README / Van Horn et al. 2015: 48,562 images, 555 leaf classes, official split 23,929 / 24,633
        DatasetDeclaration("nabirds", "NABirds", "benchmark.data.nabirds", 555, (23929, 24633), parts=True,
                           cub_layout=False),
        # PartImageNet README: 158 classes, 24,095 images; the Seg split's sizes are not published
        DatasetDeclaration("partimagenet", "PartImageNet (Seg split)", "benchmark.data.partimagenet", 158,
                           (24095, 24095), parts=True, cub_layout=False),
        # Hesse et al. ICCV 2023: 50 classes, 50,000 train / 500 test images with rendered interventions;
        # its ground truth is part maps and interventions: the FunnyBirds protocols read both, the suite's part
        # metrics read the part maps as part masks (benchmark/run/ground_truth.py:part_map_masks)
        DatasetDeclaration("funnybirds", "FunnyBirds", "benchmark.data.funnybirds", 50, (50000, 500), parts=True,
                           cub_layout=False),
    )
}


#: the datasets `protobench make-data KIND` generates in their official layout (KIND is the dataset's name)
GENERATED_DATASETS = ("synthbirds", "nabirds", "partimagenet", "funnybirds")


def installed_datasets() -> dict[str, tuple[DatasetDeclaration, Provider]]:
    """The datasets installed packages declare (``protobench.datasets``) that load; one whose name a
    built-in has, or two distributions declare, or that does not load, is skipped with a warning."""
    from methods.plugins import discovered  # entry points are read on first use, not on import

    return discovered(PLUGIN_GROUP, DATASETS, DatasetDeclaration)


def dataset_declaration(name: str) -> tuple[DatasetDeclaration, Provider] | None:
    """The declaration of a built-in or an installed dataset and who provides it (None: unknown)."""
    from methods.plugins import BUILTIN, check_clash, installed

    if name in DATASETS:
        check_clash(PLUGIN_GROUP, name, DATASETS)
        return DATASETS[name], BUILTIN
    return installed(PLUGIN_GROUP, name, DATASETS, DatasetDeclaration)


def known_datasets() -> list[str]:
    """Every dataset a grid may name: the built-ins, then the installed ones."""
    return [*DATASETS, *sorted(installed_datasets())]
