"""The reference-rows grid of issue 40 on the tests' tiny synthbirds: protopnet (two epochs with a
push), kmex, knn and linear_probe (two epochs), seeds 0 and 1, J = 2, CPU; ``run_reference_grid``
runs it through ``protobench run`` and returns the runs folder."""
from __future__ import annotations

from pathlib import Path

from benchmark.cli import main
from tiny_grid import write_tiny_grid

REFERENCE_SWEEP = [
    {"method": "protopnet", "seed": [0, 1],
     "method_args": {"warm_epochs": 1, "joint_epochs": 1, "push_epochs": [1], "last_layer_epochs": 2}},
    {"method": ["kmex", "knn"], "seed": [0, 1]},
    {"method": "linear_probe", "seed": [0, 1], "method_args": {"epochs": 2, "pool": "mean", "lr": 0.5}},
]


def run_reference_grid(root: Path) -> Path:
    grid = write_tiny_grid(root / "reference.toml", "reference", root / "synthbirds", device="cpu",
                           sweep=REFERENCE_SWEEP)
    runs = root / "runs"
    assert main(["run", str(grid), "--runs-dir", str(runs)]) == 0
    return runs
