"""``plan GRID --tuning-trials N``: the GPU-hours of tuning every cell of a grid with N trials.

A trial costs what the cell's run costs (:func:`benchmark.estimates.plan.run_hours`: the method's
epochs over the training split and one evaluation): an upper bound, since a trial trains on the
training split less its validation share and scores the validation images instead of the test
split. With ``plan --perf FILE`` written by ``perf GRID --tuning K --out FILE``, a method's trial
is charged that cost × its measured ratio of packed or batched trials (``--batch K``, whichever
was cheaper) to sequential ones (:meth:`benchmark.estimates.costs.TuningMeasurement.factor`).
The token caches are the grid's own (a trial reads the training entry by index), so tuning adds
no cache to build.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from benchmark.cluster import ClusterProfile
from benchmark.estimates.costs import Costs
from benchmark.estimates.plan import run_hours
from benchmark.grid import GridSpec
from benchmark.tuning.config import tuning_cells, tuning_config


@dataclass(frozen=True)
class CellCost:
    label: str
    trials: int
    trial_hours: float
    gpus: int
    run_basis: str  # what the cell's run cost is (measured, scaled from a measurement, the model)
    ratio: str = "sequential trials (no perf --tuning measurement)"  # what a trial costs of that run

    @property
    def gpu_hours(self) -> float:
        return self.trials * self.trial_hours * self.gpus


def tuning_costs(grid: GridSpec, profile: ClusterProfile, costs: Costs, trials: int) -> list[CellCost]:
    config = tuning_config(grid, trials=trials)
    out = []
    for cell in tuning_cells(grid, list(grid.runs), config):
        spec = cell.runs[0]  # the cell's run: what one trial costs at most
        hours, source, _ = run_hours(costs, spec, profile)
        measured = costs.tuning_factor(spec.method)
        ratio = CellCost.ratio
        if measured is not None:
            factor, mode = measured
            hours *= factor
            ratio = (f"× {factor:.2f} ({mode} over sequential ones, perf --tuning"
                     + (" on a CPU" if costs.cpu_measured else "") + ")")
        out.append(CellCost(cell.label, trials, hours, max(profile.shape_for(spec).gpus_per_node, 1), source, ratio))
    return out


def _run_bases(cells: list[CellCost]) -> str:
    """The run costs of a method's cells in a few words: the basis itself when the cells share it,
    else how many cells each kind of basis (measured, scaled from measured, the model) costed."""
    bases = Counter(c.run_basis for c in cells)
    if len(bases) == 1:
        return next(iter(bases))
    kinds = Counter()
    for basis, n in bases.items():
        kinds[basis.split(" (")[0]] += n
    return ", ".join(f"{kind}: {n} cell(s)" for kind, n in sorted(kinds.items()))


def tuning_lines(cells: list[CellCost], profile: ClusterProfile) -> list[str]:
    """The plan's tuning section: per method the trials and GPU-hours, and the total."""
    by_method: dict[str, list[CellCost]] = {}
    for cell in cells:
        by_method.setdefault(cell.label.split(" ")[0], []).append(cell)
    trials = cells[0].trials if cells else 0
    lines = [f"tuning: {len(cells)} cell(s) × {trials} trials each (the same for every method; an upper bound: "
             "a trial trains on the training split less its validation share)"]
    for method, group in sorted(by_method.items()):
        ratios = sorted({c.ratio for c in group})  # one per method: its perf --tuning row, or none
        lines.append(f"  {method:<22} {len(group):>3} cell(s)  {sum(c.trials for c in group):>5} trials  "
                     f"{sum(c.gpu_hours for c in group):8.4g} GPU-h  (run cost {_run_bases(group)}; "
                     f"{'; '.join(ratios)})")
    total = sum(c.gpu_hours for c in cells)
    lines.append(f"  total {total:.4g} GPU-h on {profile.device_model} (workers pay start-up once each; the "
                 "token caches are the grid's own)")
    return lines
