"""A grid's [robustness] table: checked like the options, and costed by ``plan`` from the cost model."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.errors import ProtobenchError
from benchmark.estimates.costmodel import DEFAULT_DEVICE
from benchmark.estimates.costs import model_costs
from benchmark.estimates.workload import run_shape, trunk_macs
from benchmark.grid import load_grid
from benchmark.robustness.cost import passes_per_image, robustness_plan_line, robustness_seconds
from benchmark.robustness.faithfulness import flipping_step
from benchmark.robustness.grid_options import grid_robustness
from benchmark.robustness.options import RobustnessOptions

GRIDS = Path(__file__).resolve().parents[2] / "benchmark" / "grids"


def test_the_passes_per_image_count_each_familys_forwards() -> None:
    assert flipping_step(224) == 512  # 50,176 = 2¹⁰·7²: 512 is the divisor nearest 501.76
    passes = passes_per_image(RobustnessOptions(("misalignment", "faithfulness", "perturbation"), steps=40), 224)
    assert passes == {"misalignment": 2 + 3 * 40, "faithfulness": 99 + 101 + 51 + 10 * 56 * 56 + 1, "perturbation": 13}


def test_plan_states_the_stages_gpu_hours_for_cub_robustness(capsys: pytest.CaptureFixture[str]) -> None:
    grid = load_grid(str(GRIDS / "cub_robustness.toml"))
    model = model_costs(DEFAULT_DEVICE).model
    options = grid_robustness(grid.robustness, grid.source, 5794)
    assert options is not None and options.images == 500
    expected = sum(sum(robustness_seconds(spec, options, model).values()) for spec in grid.runs) / 3600
    spec = grid.runs[0]
    by_hand = model.compute_seconds((trunk_macs(spec) + run_shape(spec).flops()) * (2 + 3 * 40) * 500, spec.precision)
    assert robustness_seconds(spec, options, model)["misalignment"] == pytest.approx(by_hand)
    line = robustness_plan_line(grid, model)
    assert f"{expected:.1f} GPU-hours" in line and "H100" in line


@pytest.mark.parametrize("table, named", [({"imagez": 3}, "imagez"), ({"images": 10**6}, "--robustness-images"),
                                          ({"epsilon": 2.0}, "--robustness-epsilon"),
                                          ({"families": ["noise"]}, "unknown noise")])
def test_a_bad_robustness_table_is_refused_by_name(table: dict, named: str) -> None:
    with pytest.raises(ProtobenchError, match=named):
        grid_robustness(table, "g.toml", 5794)
