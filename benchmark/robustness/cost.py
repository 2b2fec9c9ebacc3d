"""GPU-hours of a grid's robustness stage from the FLOPs cost model (benchmark/estimates/costmodel.py):
per image, the passes of the live trunk + head each family makes, times their multiply-adds
(``trunk_macs`` + the head's, benchmark/estimates/workload.py; a backward pass is twice a forward),
at the run's precision on the plan's device.

Passes per image (S the image size, benchmark/robustness/ for each family's rule):
* misalignment: the clean pass, ``steps`` forward + backward PGD steps, the attacked pass
  (2 + 3·steps forward-equivalents);
* faithfulness (Quantus' defaults): PixelFlipping S²/step + 1, RegionPerturbation 100 + 1, ROAD
  50 + 1, Infidelity 10 samples × (S/4)² patches (+ 1); ROAD's sparse imputation runs on the CPU
  and is not counted;
* perturbation: the clean pass and 6 perturbations × 2 targets.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from benchmark.config import RunSpec
from benchmark.estimates.costmodel import CostModel
from benchmark.estimates.workload import run_shape, split_images, trunk_macs
from benchmark.robustness.faithfulness import flipping_step
from benchmark.robustness.options import RobustnessOptions

if TYPE_CHECKING:
    from benchmark.grid import GridSpec

ROAD_PERCENTAGES = 50  # quantus.ROAD: percentages range(1, 100, 2)
REGIONS = 100  # quantus.RegionPerturbation: regions_evaluation
INFIDELITY_SAMPLES, INFIDELITY_PATCH = 10, 4  # quantus.Infidelity: n_perturb_samples, perturb_patch_sizes


def passes_per_image(options: RobustnessOptions, image_size: int) -> dict[str, float]:
    """Forward-pass equivalents per image of each asked family (module docstring)."""
    passes: dict[str, float] = {}
    if "misalignment" in options.families:
        passes["misalignment"] = 2 + 3 * options.steps
    if "faithfulness" in options.families:
        flips = image_size * image_size // flipping_step(image_size) + 1
        patches = math.ceil(image_size / INFIDELITY_PATCH) ** 2
        passes["faithfulness"] = flips + (REGIONS + 1) + (ROAD_PERCENTAGES + 1) + INFIDELITY_SAMPLES * patches + 1
    if "perturbation" in options.families:
        passes["perturbation"] = 1 + 12
    return passes


def robustness_seconds(spec: RunSpec, options: RobustnessOptions, model: CostModel) -> dict[str, float]:
    """Compute seconds of the stage on one run, per family."""
    images = options.images or split_images(spec, "test")
    forward = trunk_macs(spec) + run_shape(spec).flops()
    return {family: model.compute_seconds(forward * count * images, spec.precision)
            for family, count in passes_per_image(options, spec.image_size).items()}


def robustness_plan_line(grid: "GridSpec", model: CostModel) -> str | None:
    """``plan``'s line for a grid with a ``[robustness]`` table: the stage's GPU-hours per family and in
    all (None for a grid without one). Checked as the options are (benchmark/robustness/grid_options.py)."""
    from benchmark.robustness.grid_options import grid_robustness

    if not grid.robustness or not grid.runs:
        return None
    totals: dict[str, float] = {}
    for spec in grid.runs:
        options = grid_robustness(grid.robustness, grid.source, split_images(spec, "test"))
        for family, seconds in robustness_seconds(spec, options, model).items():
            totals[family] = totals.get(family, 0.0) + seconds / 3600
    parts = ", ".join(f"{family} {hours:.1f} h" for family, hours in totals.items())
    return (f"robustness stage ([robustness], `protobench robustness GRID` once the runs are trained): "
            f"{sum(totals.values()):.1f} GPU-hours ({parts}) from the cost model on {model.device.name}, beside "
            f"the training estimate above")
