"""The local executor: the runs of a grid in this process, one after another (``protobench run``
without ``--executor``), and the checks before any training every executor shares
(:func:`preflight`); which runs are pending and their outcomes: benchmark/run/pending.py.
The SLURM executors (``slurm.executors``) build on these; this module imports nothing of ``slurm``.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmark.backbones import backbone_spec
from benchmark.config import RunSpec, check_prototype_count
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec
from benchmark.method_lookup import declaration, stand_in_method
from benchmark.run.pending import Outcome, pending_runs
from benchmark.run.prepare import check_data, check_device, check_images_per_class, load_trunk
from benchmark.run.runner import execute_run
from benchmark.run.states import AskScheduler
from benchmark.run.store import RunBusy


def preflight(runs: list[RunSpec]) -> None:
    """Every user error before any training, so a bad grid fails at once rather than hours in:
    each method built with its ``method_args`` on a stand-in context, every dataset's
    annotations read and every image decoded (:func:`benchmark.data.check_images`), the number
    of prototypes against the dataset's classes (and against each class's training images for a
    method that clusters them), every trunk's weights loaded."""
    seen_data: dict[tuple[str, str, int], int] = {}  # → number of classes
    seen_trunks: set[tuple[str, str, str]] = set()
    for spec in runs:
        stand_in_method(spec.method, spec.method_args, spec.prototypes_per_class, backbone=spec.backbone,
                        has_cls_attention=backbone_spec(spec.backbone).architecture.has_cls_token)
        data_key = (spec.dataset, spec.data_root, spec.image_size)
        if data_key not in seen_data:
            seen_data[data_key] = check_data(spec)
        check_prototype_count(spec, seen_data[data_key])
        if declaration(spec.method).clusters_each_class:
            check_images_per_class(spec)
        trunk_key = (spec.backbone, spec.weights, repr(sorted(spec.backbone_args.items())))
        if trunk_key not in seen_trunks:
            seen_trunks.add(trunk_key)
            load_trunk(spec)


def run_local(grid: GridSpec, runs: list[RunSpec], runs_root: Path, cache_root: Path, *,
              retry_failed: bool = False, rerun_stale: bool = False, progress: bool | None = None,
              allow_code_change: bool = False, tensorboard_root: Path | None = None,
              ask: AskScheduler | None = None, report: Callable[[str], None] | None = None) -> list[Outcome]:
    """Execute the pending runs in this process; a failed run is recorded and the next one starts.
    ``tensorboard_root``: each run's TensorBoard events go to ``tensorboard_root/<grid>/<run_id>``;
    ``ask``: how to ask SLURM about runs submitted to it (:func:`pending_runs`); ``report``: receives
    one overall progress line after each run (runs settled of the grid's, elapsed time, the
    estimated time left: :func:`time_left`)."""
    todo, outcomes = pending_runs(grid, runs, runs_root, retry_failed=retry_failed, rerun_stale=rerun_stale, ask=ask)
    for spec in {spec.device: spec for spec in todo}.values():  # a device this machine lacks is a user error
        check_device(spec)
    preflight(todo)
    started, settled = time.monotonic(), len(runs) - len(todo)
    hours = modelled_hours(todo) if report is not None else []
    for executed, spec in enumerate(todo, start=1):
        try:
            execute_run(spec, grid.run_dir(runs_root, spec), cache_root=cache_root, progress=progress,
                        allow_code_change=allow_code_change,
                        tensorboard_dir=grid.run_dir(tensorboard_root, spec) if tensorboard_root else None)
            outcomes.append(Outcome(spec, "done"))
        except RunBusy as busy:  # another `protobench run` (or a job) is training it: leave it alone
            outcomes.append(Outcome(spec, "running-elsewhere", busy.holder))
        except ProtobenchError as err:
            outcomes.append(Outcome(spec, "failed", str(err)))
        except Exception as err:  # recorded in failure.json by execute_run
            outcomes.append(Outcome(spec, "failed", f"{type(err).__name__}: {err}"))
        settled += 1
        if report is not None:
            failed = sum(o.state == "failed" for o in outcomes)
            elapsed = time.monotonic() - started
            left = time_left(elapsed, hours, executed)
            report(f"grid {grid.name!r}: {settled}/{len(runs)} runs settled"
                   + (f" ({failed} failed)" if failed else "")
                   + f", {clock(elapsed)} elapsed" + (f", {left}" if left else ""))
    return outcomes


def clock(seconds: float) -> str:
    """``H:MM:SS``."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def modelled_hours(runs: Sequence[RunSpec]) -> list[float]:
    """Each run's hours by the cost model (benchmark/estimates/plan.py: epochs × per-epoch cost, so a
    longer schedule or a larger trunk counts for more); only their ratios are used."""
    from benchmark.cluster import ClusterProfile
    from benchmark.estimates.costs import model_costs
    from benchmark.estimates.plan import run_hours

    profile = ClusterProfile()
    costs = model_costs(profile.device_model)
    return [run_hours(costs, spec, profile)[0] for spec in runs]


def time_left(elapsed: float, hours: Sequence[float], executed: int) -> str | None:
    """The time the runs after the first ``executed`` should take, said with how it was estimated:
    the ``elapsed`` seconds the first ones took here, scaled by the ratio of their modelled
    ``hours`` (:func:`modelled_hours`); None when nothing is left or nothing ran yet."""
    ran, left = sum(hours[:executed]), sum(hours[executed:])
    if executed == 0 or executed >= len(hours) or ran <= 0:
        return None
    return (f"about {clock(elapsed * left / ran)} left (the {executed} run(s) timed here, "
            f"scaled to the {len(hours) - executed} left by the cost model's relative run costs)")
