"""The commands that look ahead of a run: ``plan`` (what a grid costs), ``perf`` (timings side by
side) and ``doctor`` (is this machine ready)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.cli.common import (
    add_grid_options,
    add_only_option,
    add_run_options,
    cache_root_of,
    check_cache_fits,
    demo_grid,
    grid_overrides,
    runs_root_of,
)
from benchmark.cli.doctor_checks import data_checks, print_checks, run_doctor, weights_checks
from benchmark.errors import ProtobenchError
from benchmark.estimates.costmodel import DEVICES
from benchmark.grid import load_grid, select_runs
from benchmark.output_file import write_output
from benchmark.cluster import ClusterProfile, load_profile

if TYPE_CHECKING:
    from benchmark.config import RunSpec
    from benchmark.estimates.caches import CacheNeed
    from benchmark.grid import GridSpec


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``plan``, ``perf`` and ``doctor`` to ``sub``."""
    from benchmark.tuning.config import BATCH_STEPS  # no torch; imported when the parser is built (reports' floor)

    p = sub.add_parser("plan", help="runs, job arrays, token caches and GPU-hours of a grid, before submitting")
    p.add_argument("grid", help="grid TOML file, e.g. benchmark/grids/cub_main.toml")
    p.add_argument("--profile", help="cluster profile TOML: job shapes (default: one shape)")
    p.add_argument("--perf", action="append", metavar="FILE",
                   help="per-epoch costs measured by `protobench perf --out FILE` from the target device "
                        "(default: the FLOPs-and-bytes model); repeat it to combine files, e.g. paper-scale "
                        "timings and a `perf --tuning K` file")
    p.add_argument("--device-model", choices=sorted(DEVICES),
                   help="the GPU the cost model assumes (default: the profile's device_model, H100)")
    add_only_option(p)
    add_grid_options(p)
    p.add_argument("--runs-dir", help="where run directories go (default: the grid's runs_dir, 'runs')")
    p.add_argument("--cache-dir", help="token cache directory whose free space is checked "
                                       "(default: RUNS_DIR/.token-cache)")
    p.add_argument("--tuning-trials", type=int, metavar="N",
                   help="also estimate `protobench tune GRID --trials N`: N trials per tuning cell")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("perf", help="timings side by side: trunk, method inference, cached vs live epochs")
    p.add_argument("grid", nargs="?", help="grid TOML (default: the demo grid); its first run, or the --only runs "
                                           "(benchmark/grids/perf.toml: every method on a full-size trunk)")
    p.add_argument("--out", help="also write the measurements as JSON (`plan --perf` reads it)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up batches before timing (paper: 5)")
    p.add_argument("--timed-batches", type=int, default=20,
                   help="timed batches, interleaved across rows (inference and training steps; default 20)")
    p.add_argument("--paper-scale", action="store_true",
                   help="the paper's setting instead of a grid: random full-size ViT-B/14, C=200, J=5, batch 128, "
                        "every method (select with --only method=vmfproto,nppp)")
    p.add_argument("--baseline", help="method the epoch ratios divide by (default: the first row's)")
    p.add_argument("--tuning", type=int, metavar="K",
                   help="also time K tuning trials of each method's cell run sequentially, packed and batched "
                        "(`tune --batch K`); --out then writes {\"rows\": …, \"tuning\": …}, which `plan --perf "
                        "--tuning-trials` reads (docs/guides/tuning.md)")
    p.add_argument("--repeats", type=int, default=1, help="repeats of the --tuning and --robustness timings (default 1)")
    p.add_argument("--robustness", metavar="FAMILIES",
                   help="time the robustness stage's families (comma-separated) against evaluate on the grid's "
                        "first run, side by side (benchmark/robustness/perf.py)")
    p.add_argument("--robustness-images", type=int, default=8, help="test images the --robustness timing scores")
    p.add_argument("--batch-step", choices=BATCH_STEPS, default="auto",
                   help="the batched trials' step, as `tune --batch-step` (default auto)")
    p.add_argument("--reading", type=int, metavar="N",
                   help="instead of training timings: the reading commands (report --ci, compare, agreement, "
                        "leaderboard, site) timed side by side as CPU seconds and peak memory on a synthetic result "
                        "set of N runs (105: one backbone of the CUB grid; --repeats repeats them)")
    p.add_argument("--reading-images", type=int, metavar="M",
                   help="test images per run of --reading (default 5794, CUB's test split)")
    p.add_argument("--reading-dir", type=Path, metavar="DIR",
                   help="--reading writes its runs to DIR/runs and the commands' outputs to DIR/outputs, and keeps "
                        "them (a later call with the same N and M reuses the runs); default: a temporary folder")
    add_run_options(p)
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser("doctor", help="check this machine for a grid: Python/torch/CUDA, data, weights, disk, SLURM")
    p.add_argument("grid", nargs="?", help="grid TOML whose data roots, weights and caches to check "
                                           "(none: the machine only)")
    add_grid_options(p)
    p.add_argument("--runs-dir", help="where run directories go (default: the grid's runs_dir, 'runs')")
    p.add_argument("--cache-dir", help="token cache directory whose free disk to check (default: RUNS_DIR/.token-cache)")
    p.add_argument("--slurm", action="store_true", help="SLURM commands missing is a failure, not a warning")
    p.add_argument("--deep", action="store_true",
                   help="decode every image of the grid's datasets (default: read every image's header, decoding a "
                        "JPEG only where it lacks its end marker), with the bounds `run` applies")
    p.set_defaults(func=cmd_doctor)


def cmd_plan(args: argparse.Namespace) -> int:
    grid = load_grid(args.grid, overrides=grid_overrides(args))  # a refused grid costs no torch import
    from benchmark.cli.plan_tables import print_plan
    from benchmark.estimates.costs import load_perfs, model_costs
    from benchmark.estimates.plan import make_plan

    if args.only:
        grid = dataclasses.replace(grid, runs=tuple(select_runs(grid, args.only)))
    profile = load_profile(args.profile) if args.profile else ClusterProfile()
    device_model = args.device_model or profile.device_model
    costs = load_perfs(args.perf, device_model) if args.perf else model_costs(device_model)
    check_present_data(grid.runs)
    plan = make_plan(grid, profile, costs)
    print_plan(plan)
    from benchmark.robustness.cost import robustness_plan_line

    if (line := robustness_plan_line(grid, costs.model)) is not None:
        print(line)
    if args.tuning_trials is not None:
        from benchmark.estimates.tuning import tuning_costs, tuning_lines

        if args.tuning_trials < 1:
            raise ProtobenchError(f"--tuning-trials {args.tuning_trials} must be ≥ 1")
        print("\n".join(tuning_lines(tuning_costs(grid, profile, costs, args.tuning_trials), profile)))
    _print_plan_file_checks(grid)
    runs_root = runs_root_of(args, grid.runs_dir)
    print_run_preview(grid, runs_root, cache_root_of(args, runs_root), [need for need, _ in plan.caches])
    try:
        check_cache_fits(list(grid.runs), cache_root_of(args, runs_root))
    except ProtobenchError as warning:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def print_run_preview(grid: GridSpec, runs_root: Path, cache_root: Path, needs: list[CacheNeed]) -> None:
    """What ``run`` would do now with the grid's runs in ``runs_root``: how many are done, stale,
    failed before, running elsewhere and to train, and how many of the token-cache entries they read
    (``needs``, the plan's) ``cache_root`` already holds. Nothing on disk is touched, and SLURM is
    not asked (``status`` tells submitted runs)."""
    from collections import Counter

    from benchmark.cache.space import missing_entries
    from benchmark.run.pending import pending_runs

    todo, settled = pending_runs(grid, list(grid.runs), runs_root, retry_failed=False, preview=True)
    states = Counter(outcome.state for outcome in settled)
    parts = [f"{states['skipped']} done", f"{len(todo)} to train"]
    parts += [f"{states[state]} {label}" for state, label in (
        ("skipped-stale", "stale (run --rerun-stale retrains them)"),
        ("skipped-failed", "failed before (run --retry-failed retries them)"),
        ("running-elsewhere", "running elsewhere")) if states[state]]
    built = len(needs) - len(missing_entries(needs, cache_root))
    print(f"run would now: {', '.join(parts)} of {len(grid.runs)} run(s) in {runs_root}; "
          f"{built} of {len(needs)} token-cache entries already built in {cache_root}")


def _print_plan_file_checks(grid: GridSpec) -> None:
    """The doctor's data and weights checks, where the paths exist on this machine; placeholders
    flagged. A plan is an estimate, so its exit status stays 0 whatever they find."""
    checks = data_checks(grid, absent_ok=True) + weights_checks(grid, absent_ok=True)
    for check in checks:
        print(check.line())
    if any(c.status == "fail" for c in checks):
        print(f"before submitting, fix the lines marked fail; `protobench doctor {grid.source}` checks the "
              "machine the jobs run on")


def check_present_data(runs: tuple[RunSpec, ...]) -> None:
    """Decode the images of every dataset whose ``data_root`` exists, as ``run`` does before
    compute (:func:`benchmark.run.prepare.check_data`); absent datasets are left to ``run``."""
    from benchmark.run.prepare import check_data

    present = {(s.dataset, s.data_root, s.image_size): s for s in runs
               if s.data_root and Path(s.data_root).expanduser().is_dir()}
    for spec in present.values():
        check_data(spec)


#: the most trials ``perf --tuning K`` times at once (a batched timing holds all K trials in memory)
MAX_TIMED_TRIALS = 64


def cmd_perf(args: argparse.Namespace) -> int:
    if args.reading is not None:
        return _reading_perf(args)
    if args.paper_scale and args.grid:
        raise ProtobenchError("perf takes a grid file or --paper-scale, not both")
    if args.timed_batches < 1 or args.warmup < 0:
        raise ProtobenchError(f"--timed-batches {args.timed_batches} must be ≥ 1 and --warmup {args.warmup} ≥ 0")
    if args.tuning is not None and not 1 <= args.tuning <= MAX_TIMED_TRIALS:
        raise ProtobenchError(f"--tuning {args.tuning} must lie in 1..{MAX_TIMED_TRIALS} (the trials timed per "
                              "method; a batch of K trials holds K trials' parameters and activations at once)")
    if args.repeats < 1:
        raise ProtobenchError(f"--repeats {args.repeats} must be ≥ 1")
    from benchmark.cli.perf_tables import print_perf  # after the option checks: a bad option costs no torch import
    from benchmark.estimates.perf import measure, paper_scale_grid, prepare_sharing_trunks

    if args.paper_scale:
        grid = paper_scale_grid(overrides=grid_overrides(args))
        runs = select_runs(grid, args.only) if args.only else list(grid.runs)
    else:
        grid = load_grid(args.grid or demo_grid(), overrides=grid_overrides(args))
        runs = select_runs(grid, args.only) if args.only else [grid.runs[0]]
    methods = [spec.method for spec in runs]
    baseline = args.baseline or methods[0]
    if baseline not in methods:
        raise ProtobenchError(f"--baseline {baseline!r} is not a method of the selected runs ({', '.join(methods)})")
    cache_root = cache_root_of(args, runs_root_of(args, grid.runs_dir))
    if args.robustness is not None:
        return _robustness_perf(args, runs[0], cache_root)
    if args.tuning is not None:  # a cell whose values lie outside its search space: refused before compute
        from benchmark.tuning.config import tuning_cells, tuning_config

        tuning_cells(grid, runs, tuning_config(grid, trials=args.tuning))
    rows = measure(prepare_sharing_trunks(runs), cache_root, warmup=args.warmup, timed_batches=args.timed_batches,
                   baseline=methods.index(baseline))
    print_perf(rows, methods.index(baseline))
    document: object = rows
    if args.tuning is not None:
        from benchmark.cli.perf_tables import print_tuning_perf
        from benchmark.estimates.tuning_perf import measure_tuning

        tuning = measure_tuning(grid, runs, args.tuning, cache_root, repeats=args.repeats, step=args.batch_step)
        print_tuning_perf(tuning)
        document = {"rows": rows, "tuning": tuning}
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_output(out, (json.dumps(document, indent=2) + "\n").encode())
    return 0


def _robustness_perf(args: argparse.Namespace, spec: RunSpec, cache_root: Path) -> int:
    from benchmark.robustness.options import parse_families
    from benchmark.robustness.perf import ratio_lines, stage_ratios
    from benchmark.run.prepare import prepare

    families = parse_families(args.robustness)
    if args.robustness_images < 1:
        raise ProtobenchError(f"--robustness-images {args.robustness_images} must be ≥ 1")
    prep = prepare(spec)
    rows = stage_ratios(prep, cache_root, families, images=args.robustness_images, repeats=args.repeats)
    print("\n".join(ratio_lines(prep, rows)))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_output(out, (json.dumps({"robustness": rows}, indent=2) + "\n").encode())
    return 0


def _reading_perf(args: argparse.Namespace) -> int:
    """``perf --reading N``: the reading commands timed on a synthetic set (benchmark/estimates/reading_perf.py)."""
    import tempfile

    from benchmark.estimates.reading_perf import measure_reading, reading_lines
    from benchmark.estimates.reading_set import (CUB_TEST_IMAGES, check_reading_folder, reading_specs,
                                                 write_reading_set)

    others = [name for name, given in (("GRID", args.grid), ("--paper-scale", args.paper_scale),
                                       ("--tuning", args.tuning is not None), ("--only", args.only),
                                       ("--runs-dir", args.runs_dir)) if given]
    if others:
        raise ProtobenchError(f"perf --reading times the reading commands on its own synthetic runs; leave out "
                              f"{', '.join(others)}")
    if args.repeats < 1:
        raise ProtobenchError(f"--repeats {args.repeats} must be ≥ 1")
    images = CUB_TEST_IMAGES if args.reading_images is None else args.reading_images
    reading_specs(args.reading)  # a bad N or M: one error before anything is written
    with tempfile.TemporaryDirectory(prefix="protobench-reading-") as scratch:
        folder = args.reading_dir or Path(scratch)
        check_reading_folder(folder / "runs", args.reading, images)
        started = time.perf_counter()
        written = write_reading_set(folder / "runs", args.reading, images)
        print(f"synthetic set: {written.runs} run(s) × {written.images} test images in {folder / 'runs'} "
              f"({time.perf_counter() - started:.1f} s to write or reuse)")
        perf = measure_reading(written.root, folder / "outputs", runs=written.runs, images=written.images,
                               repeats=args.repeats)
    print("\n".join(reading_lines(perf)))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_output(out, (json.dumps(perf.to_json(), indent=2) + "\n").encode())
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    grid = load_grid(args.grid, overrides=grid_overrides(args)) if args.grid else None
    cache_root = cache_root_of(args, runs_root_of(args, grid.runs_dir)) if grid else None
    return print_checks(run_doctor(grid, cache_root, slurm_required=args.slurm, deep=args.deep))
