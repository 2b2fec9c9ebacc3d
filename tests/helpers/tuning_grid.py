"""The tests' tuning grid: the tiny grid with vMFProto and ProtoPNet at two epochs each, seeds 0
and 1, and a [tuning] table (a narrowed space for vMFProto). 16 images per class, so that the
test split holds the 30 images the per-image paired test needs (reports.stats.MIN_IMAGES)."""
from __future__ import annotations

from pathlib import Path

from tiny_grid import write_tiny_grid

TUNING_SWEEP = [
    {"method": "vmfproto", "method_args": {"discovery_epochs": 1, "end_to_end_epochs": 1}, "seed": [0, 1]},
    {"method": "protopnet", "method_args": {"warm_epochs": 2, "joint_epochs": 0, "push_epochs": [0],
                                            "last_layer_epochs": 1}, "seed": [0, 1]},
]


def write_tuning_grid(path: Path, data_root: Path, tuning: str = "") -> Path:
    write_tiny_grid(path, "tun", data_root, device="cpu", sweep=TUNING_SWEEP, without=["method"],
                    dataset_args={"classes": 4, "images_per_class": 16, "seed": 0})
    path.write_text(path.read_text() + "[tuning]\nsampler = \"tpe\"\n"
                    "[tuning.space.vmfproto]\ntau = { kind = \"uniform\", low = 0.2, high = 0.8 }\n" + tuning)
    return path
