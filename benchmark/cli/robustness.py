"""The robustness stage's commands: ``protobench evaluate RUN --robustness FAMILIES`` (one run, here) and
``protobench robustness GRID`` (every finished run of a grid, locally or as SLURM job arrays), both
with the stage's settings (benchmark/robustness/options.py)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.errors import ProtobenchError
from benchmark.robustness.options import (DEFAULT_BATCH, DEFAULT_EPSILON, DEFAULT_PERCENTILE, DEFAULT_STEP,
                                          DEFAULT_STEPS, DEFAULT_TOP_K, FAMILIES, RobustnessOptions, parse_families)

if TYPE_CHECKING:
    from benchmark.cluster import ClusterProfile
    from benchmark.config import RunSpec
    from benchmark.grid import GridSpec
    from benchmark.run.pending import Outcome

#: the settings options and the RobustnessOptions field each sets
SETTINGS = {"robustness_epsilon": "epsilon", "robustness_step": "step", "robustness_steps": "steps",
            "robustness_percentile": "percentile", "robustness_top_k": "top_k", "robustness_images": "images",
            "robustness_batch": "batch_size"}


def add_settings_options(p: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """The stage's settings; without ``defaults`` an option left out is None (the grid's table decides)."""
    def default(value: object) -> object:
        return value if defaults else None

    source = "" if defaults else "the grid's [robustness] table, else "
    p.add_argument("--robustness-epsilon", type=float, default=default(DEFAULT_EPSILON),
                   help=f"L∞ budget of the misalignment PGD in pixel units, in (0, 1] "
                        f"(default: {source}{DEFAULT_EPSILON})")
    p.add_argument("--robustness-step", type=float, default=default(DEFAULT_STEP),
                   help=f"PGD step in pixel units, in (0, ε] (default: {source}{DEFAULT_STEP})")
    p.add_argument("--robustness-steps", type=int, default=default(DEFAULT_STEPS),
                   help=f"PGD steps, ≥ 1 (default: {source}{DEFAULT_STEPS})")
    p.add_argument("--robustness-percentile", type=float, default=default(DEFAULT_PERCENTILE),
                   help=f"percentile of the high-activation box kept out of the attack, in (0, 100) "
                        f"(default: {source}{DEFAULT_PERCENTILE:g})")
    p.add_argument("--robustness-top-k", type=int, default=default(DEFAULT_TOP_K),
                   help=f"ground-truth-class prototypes attacked per image (default: {source}{DEFAULT_TOP_K})")
    p.add_argument("--robustness-images", type=int,
                   help=f"size of the fixed subsample of test images (default: {source}all)")
    p.add_argument("--robustness-batch", type=int, default=default(DEFAULT_BATCH),
                   help=f"images per batch of the stage (default: {source}{DEFAULT_BATCH})")


def add_robustness_options(p: argparse.ArgumentParser) -> None:
    """Add ``--robustness`` and its settings to the ``evaluate`` parser."""
    p.add_argument("--robustness", metavar="FAMILIES",
                   help=f"run only the robustness stage on the live trunk, from the checkpoint: a comma-separated "
                        f"list of {', '.join(FAMILIES)} (the ordinary evaluation is left as it is)")
    add_settings_options(p)


def add_robustness_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``robustness GRID``."""
    from benchmark.cli.common import add_grid_options, add_only_option

    p = sub.add_parser("robustness", help="the robustness stage on every finished run of a grid, with its "
                                          "[robustness] settings: here, or as SLURM job arrays")
    p.add_argument("grid", help="grid TOML file whose runs are trained, e.g. benchmark/grids/cub_robustness.toml")
    p.add_argument("--families", metavar="FAMILIES",
                   help=f"a comma-separated list of {', '.join(FAMILIES)} (default: the grid's [robustness] families)")
    add_settings_options(p, defaults=False)
    add_only_option(p)
    add_grid_options(p)
    p.add_argument("--runs-dir", help="where the grid's runs are (default: the grid's runs_dir, 'runs')")
    p.add_argument("--retry-failed", action="store_true", help="run the stage again on runs where it failed before")
    p.add_argument("--executor", default="local", choices=["local", "submitit-local", "debug", "slurm"],
                   help="where the stage executes (local: in this process, run after run)")
    p.add_argument("--profile", help="cluster profile TOML for --executor slurm (slurm/profiles/)")
    p.set_defaults(func=cmd_robustness_grid)


def robustness_options(args: argparse.Namespace) -> RobustnessOptions:
    return RobustnessOptions(parse_families(args.robustness),
                             **{field: getattr(args, option) for option, field in SETTINGS.items()})


def cmd_robustness(args: argparse.Namespace) -> int:
    from benchmark.robustness.stage import run_robustness

    section = run_robustness(Path(args.run_dir), robustness_options(args))
    print("  ".join(f"{k}={v:.2f}" for k, v in section["metrics"].items() if v is not None))
    for key, note in section["notes"].items():
        print(f"{key}: {note}")
    return 0


def cmd_robustness_grid(args: argparse.Namespace) -> int:
    """``protobench robustness GRID``: the stage's outcome per run, and where submitted jobs are followed."""
    from benchmark.cli.common import grid_overrides, runs_root_of
    from benchmark.cluster import ClusterProfile, load_profile
    from benchmark.grid import load_grid, select_runs
    from benchmark.robustness.grid_stage import grid_stage_options, run_stage_local

    grid = load_grid(args.grid, overrides=grid_overrides(args))
    runs = select_runs(grid, args.only) if args.only else list(grid.runs)
    runs_root = runs_root_of(args, grid.runs_dir)
    overrides = {field: getattr(args, option) for option, field in SETTINGS.items()}
    overrides["families"] = parse_families(args.families) if args.families else None
    options = grid_stage_options(grid, runs, overrides)
    print(f"grid {grid.name!r}: robustness stage ({', '.join(options.families)}) on {len(runs)} runs under "
          f"{runs_root / grid.name}", flush=True)
    if args.executor == "local":
        if args.profile:
            raise ProtobenchError("--profile only applies to submitted jobs; add --executor slurm (or submitit-local)")
        from slurm.scheduler import query_jobs

        outcomes = run_stage_local(grid, runs, runs_root, options, retry_failed=args.retry_failed, ask=query_jobs,
                                   report=lambda line: print(line, flush=True))
        return _stage_summary(outcomes)
    return _submit_stage(grid, runs, runs_root, options, args,
                         load_profile(args.profile) if args.profile else ClusterProfile())


def _submit_stage(grid: "GridSpec", runs: "list[RunSpec]", runs_root: Path, options: RobustnessOptions,
                  args: argparse.Namespace, profile: "ClusterProfile") -> int:
    from slurm.executors import submit_stage, wait_for_stage

    if args.executor == "slurm" and not args.profile:
        raise ProtobenchError("--executor slurm needs --profile: a cluster profile TOML "
                              "(slurm/profiles/example.toml to adapt, slurm/profiles/local.toml for the test cluster)")
    submission = submit_stage(grid, runs, runs_root, options, executor=args.executor, profile=profile,
                              retry_failed=args.retry_failed)
    for array in submission.arrays:
        ids = array.job_ids
        packed = f" packed into {len(ids)} task(s)" if len(array.specs) > len(ids) else ""
        print(f"submitted the stage of {len(array.specs)} run(s){packed} as job(s) {ids[0]}"
              f"{f' … {ids[-1]}' if len(ids) > 1 else ''} [{array.shape.describe()}]")
    if not submission.arrays:
        print("nothing to submit")
        return _stage_summary(submission.settled)
    if args.executor == "slurm":
        print(f"job logs: {submission.folder}\nfollow with the same command: it submits nothing queued or scored, "
              "and lists each run's state")
        return _stage_summary(submission.settled)
    return _stage_summary(submission.settled + wait_for_stage(submission, options))


def _stage_summary(outcomes: "list[Outcome]") -> int:
    """One line per run not scored now (and a count of those that were); exit status 1 when any failed."""
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.state] = counts.get(o.state, 0) + 1
        if o.state != "done":
            print(f"{o.state}: {o.spec.run_id} {o.spec.label}: {o.detail}")
    print(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    return 1 if any(o.failed for o in outcomes) else 0
