"""``plan GRID --tuning-trials N``: N trials of each tuning cell at its run's cost."""
from __future__ import annotations

import re

from tuning_grid import write_tuning_grid

from benchmark.cli import main
from benchmark.cluster import ClusterProfile
from benchmark.estimates.costs import model_costs
from benchmark.estimates.plan import run_hours
from benchmark.grid import load_grid


def test_plan_estimates_tuning_as_trials_times_the_cells_run(tmp_path, capsys):
    grid_path = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    assert main(["plan", str(grid_path), "--tuning-trials", "5"]) == 0
    out = capsys.readouterr().out
    assert "tuning: 2 cell(s) × 5 trials each" in out
    grid, profile = load_grid(grid_path), ClusterProfile()
    costs = model_costs(profile.device_model)
    seed0 = [spec for spec in grid.runs if spec.seed == 0]  # one cell per method; its trials train seed 0
    expected = 5 * sum(run_hours(costs, spec, profile)[0] for spec in seed0)
    total = float(re.search(r"total ([0-9.e+-]+) GPU-h", out).group(1))
    assert expected > 0 and abs(total - expected) <= 1e-3 * expected
    assert main(["plan", str(grid_path), "--tuning-trials", "0"]) == 2
