"""The tests' tuning grid: the tiny grid with vMFProto and ProtoPNet at two epochs each, seeds 0
and 1, and a [tuning] table (a narrowed space for vMFProto). 16 images per class, so that the
test split holds the 30 images the per-image paired test needs (reports.stats.MIN_IMAGES).
``write_batched_grid``: ProtoPNet's cosine head, the other setting checked under ``tune --batch K``
(seed 0, two epochs and a push), in a grid of its own so the tuning grid's counts stay."""
from __future__ import annotations

from pathlib import Path

import pytest
from tiny_grid import write_tiny_grid

import benchmark.run.prepare as prepare
from benchmark.data.dataset import ImageDataset

TUNING_SWEEP = [
    {"method": "vmfproto", "method_args": {"discovery_epochs": 1, "end_to_end_epochs": 1}, "seed": [0, 1]},
    {"method": "protopnet", "method_args": {"warm_epochs": 2, "joint_epochs": 0, "push_epochs": [0],
                                            "last_layer_epochs": 1}, "seed": [0, 1]},
]

BATCHED_SWEEP = [
    {"method": "protopnet", "method_args": {"similarity": "cosine", "warm_epochs": 1, "joint_epochs": 1,
                                            "push_epochs": [0], "last_layer_epochs": 1}, "seed": [0]},
]
DATASET_ARGS = {"classes": 4, "images_per_class": 16, "seed": 0}


def write_tuning_grid(path: Path, data_root: Path, tuning: str = "", *, keys: str = "") -> Path:
    """The grid file; ``keys``: lines of the [tuning] table itself, ``tuning``: text after it (in
    the [tuning.space.vmfproto] table, or tables of its own)."""
    write_tiny_grid(path, "tun", data_root, device="cpu", sweep=TUNING_SWEEP, without=["method"],
                    dataset_args=DATASET_ARGS)
    path.write_text(path.read_text() + "[tuning]\nsampler = \"tpe\"\n" + keys
                    + "[tuning.space.vmfproto]\ntau = { kind = \"uniform\", low = 0.2, high = 0.8 }\n" + tuning)
    return path


def write_batched_grid(path: Path, data_root: Path) -> Path:
    """The grid of ``BATCHED_SWEEP`` with a [tuning] table (each method's own space)."""
    write_tiny_grid(path, "bat", data_root, device="cpu", sweep=BATCHED_SWEEP, without=["method"],
                    dataset_args=DATASET_ARGS)
    path.write_text(path.read_text() + "[tuning]\nsampler = \"tpe\"\n")
    return path


def record_opened_splits(patch: pytest.MonkeyPatch) -> list[str]:
    """Instrument the runner: every split loaded (``load_split:S``), every token-cache entry opened
    (``cache:S``) and every image decoded (``image:S``) is appended to the list returned."""
    opened: list[str] = []
    load_split, token_source, load_image = prepare.load_split, prepare.token_source, ImageDataset.load_image

    def recording_load_split(spec, split):
        opened.append(f"load_split:{split}")
        return load_split(spec, split)

    def recording_token_source(trunk, dataset, **kwargs):
        opened.append(f"cache:{dataset.split}")
        return token_source(trunk, dataset, **kwargs)

    def recording_load_image(self, i):
        opened.append(f"image:{self.split}")
        return load_image(self, i)

    patch.setattr(prepare, "load_split", recording_load_split)
    patch.setattr(prepare, "token_source", recording_token_source)
    patch.setattr(ImageDataset, "load_image", recording_load_image)
    return opened
