"""The commands that run and follow runs: ``run``, ``demo``, ``evaluate``, ``status``, ``cancel``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.cli.common import (
    add_check_adapters_argument,
    add_run_options,
    adapter_imports,
    cache_root_of,
    check_cache_fits,
    demo_grid,
    existing_runs_dir,
    grid_overrides,
    runs_root_of,
    tensorboard_dir,
)
from benchmark.cli.robustness import add_robustness_command, add_robustness_options, cmd_robustness
from benchmark.errors import ProtobenchError, nearest_sibling
from benchmark.grid import load_grid, select_runs
from benchmark.run.store import find_run_dirs
from benchmark.run.own_code import AdapterImports
from benchmark.cluster import ClusterProfile, load_profile
from benchmark.run.states import latest_job, record_cancelled, run_states
from slurm.scheduler import cancel_jobs, query_jobs, slurm_available

if TYPE_CHECKING:
    from benchmark.config import RunSpec
    from benchmark.grid import GridSpec
    from benchmark.run.store import RunDir
    from benchmark.run.pending import Outcome


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``run``, ``demo``, ``evaluate``, ``status`` and ``cancel`` to ``sub``."""
    p = sub.add_parser("run", help="run (or resume) every run of a grid")
    p.add_argument("grid", help="grid TOML file, e.g. benchmark/grids/demo.toml")
    add_run_options(p)
    add_execution_options(p)
    p.add_argument("--hyperparameters", choices=["default", "tuned"],
                   help="tuned: each run with its tuning cell's best trial (`protobench tune` first); default: the "
                        "grid's method_args (default: the grid's tuning.hyperparameters, else default)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="the demo grid on generated synthbirds, locally")
    add_run_options(p)
    add_execution_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("evaluate", help="re-evaluate a finished run from its checkpoint")
    p.add_argument("run_dir", help="a finished run's directory (runs/GRID/RUN_ID)")
    p.add_argument("--map-pool", type=int, choices=[1, 2], help="override the run's map_pool")
    p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
    p.add_argument("--allow-code-change", action="store_true",
                   help="re-evaluate even though the method's code changed since the run trained (stale)")
    p.add_argument("--rescore", action="store_true",
                   help="replace the scores in the run's result.json with the current metric code's (a result "
                        "scored by earlier metric code is flagged by report/plot/export until then)")
    add_robustness_options(p)
    p.set_defaults(func=cmd_evaluate)
    add_robustness_command(sub)

    p = sub.add_parser("status", help="table of the runs under a runs directory, with their SLURM job states")
    p.add_argument("runs_dir", help="a directory `protobench run` wrote to (e.g. runs/ or runs/demo)")
    p.add_argument("--json", action="store_true", help="print one JSON record per run (state, spec, metrics)")
    add_check_adapters_argument(p)
    p.add_argument("--wide", action="store_true", help="every column (grid, variant, backbone, dataset, warnings, "
                                                       "progress), not only those that vary or hold something")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("cancel", help="scancel the pending or running SLURM jobs (training and robustness stage) of "
                                      "a grid, a runs directory or runs")
    p.add_argument("target", help="a grid TOML file, a directory `protobench run --executor slurm` wrote to "
                                  "(runs/GRID, runs/GRID/RUN_ID) or the start of a run id")
    p.add_argument("--runs-dir", help="where a grid's or a run id's runs are (default: the grid's runs_dir, 'runs')")
    p.set_defaults(func=cmd_cancel)


def add_execution_options(p: argparse.ArgumentParser) -> None:
    """What ``run`` and ``demo`` take on top of :func:`add_run_options`: where and how runs execute."""
    p.add_argument("--retry-failed", action="store_true", help="run again the runs that failed before")
    p.add_argument("--rerun-stale", action="store_true",
                   help="train again the runs whose result is stale (the method's code or defaults changed, or an "
                        "earlier version wrote it); the stale result is deleted first")
    p.add_argument("--allow-code-change", action="store_true",
                   help="resume checkpoints written by another code version (result.json lists every version)")
    p.add_argument("--executor", default="local", choices=["local", "submitit-local", "debug", "slurm"],
                   help="where runs execute (local: in this process)")
    p.add_argument("--profile", help="cluster profile TOML for --executor slurm (slurm/profiles/)")
    p.add_argument("--tensorboard", metavar="DIR",
                   help="also log each epoch's loss terms, learning rates and time as TensorBoard scalars "
                        "under DIR/GRID/RUN_ID (needs pip install 'protobench[tensorboard]')")


def cmd_run(args: argparse.Namespace) -> int:
    grid = load_grid(args.grid, overrides=grid_overrides(args))  # a refused grid costs no torch import
    from benchmark.run.local import run_local
    from benchmark.cli.status_table import print_status

    runs = select_runs(grid, args.only) if args.only else list(grid.runs)
    runs_root = runs_root_of(args, grid.runs_dir)
    runs = _with_hyperparameters(grid, runs, runs_root, getattr(args, "hyperparameters", None))
    cache_root = cache_root_of(args, runs_root)
    check_cache_fits(runs, cache_root)  # before any compute
    tensorboard_root = tensorboard_dir(args)
    if args.executor != "local":
        return _submit(grid, runs, runs_root, cache_root, args, tensorboard_root)
    if args.profile:
        raise ProtobenchError("--profile only applies to submitted runs; add --executor slurm (or submitit-local)")
    print(f"grid {grid.name!r}: {len(runs)} runs → {runs_root / grid.name}", flush=True)
    outcomes = run_local(grid, runs, runs_root, cache_root, retry_failed=args.retry_failed,
                         rerun_stale=args.rerun_stale,
                         allow_code_change=args.allow_code_change, tensorboard_root=tensorboard_root,
                         ask=query_jobs,  # SLURM is asked only about runs submitted to it
                         report=lambda line: print(line, flush=True))
    print_status(runs_root / grid.name, adapters=AdapterImports.of_grid({spec.method for spec in grid.runs}))
    return _summary(outcomes)


def _with_hyperparameters(grid: GridSpec, runs: list[RunSpec], runs_root: Path, chosen: str | None) -> list[RunSpec]:
    """The runs as the grid sets them, or (``tuned``) with their tuning cell's best trial."""
    from benchmark.tuning.config import tuning_config
    from benchmark.tuning.tuned import tuned_runs

    if (chosen or tuning_config(grid).hyperparameters) == "default":
        return runs
    tuned = tuned_runs(grid, runs, runs_root)
    print(f"hyperparameters: tuned (each cell's best trial of {tuned[0].tuned['trials']} on the validation split)")
    return tuned


def _summary(outcomes: list[Outcome]) -> int:
    """Print the runs left to another process and the failed ones (failed now or in an earlier
    invocation, with the ``--retry-failed`` hint); exit status 1 when any run is failed."""
    for o in outcomes:
        if o.state == "running-elsewhere":
            print(f"running elsewhere: {o.spec.run_id} {o.spec.label}: {o.detail or 'another process holds it'}")
    stale = [o for o in outcomes if o.state == "skipped-stale"]
    for o in stale:
        print(f"stale, not re-run: {o.spec.run_id} {o.spec.label}: {o.detail}")
    if stale:
        print(f"{len(stale)} run(s) of the grid have a stale result (docs/design/run-identity.md); "
              "run the same command with --rerun-stale to train them again")
    failed = [o for o in outcomes if o.failed]
    for o in failed:
        print(f"failed: {o.spec.run_id} {o.spec.label}: {o.detail}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} run(s) of the grid failed; run the same command with --retry-failed to try them again",
              file=sys.stderr)
    return 1 if failed else 0


def _submit(grid: GridSpec, runs: list[RunSpec], runs_root: Path, cache_root: Path, args: argparse.Namespace,
            tensorboard_root: Path | None) -> int:
    """``run --executor submitit-local|debug|slurm``: one job array per job shape."""
    from slurm.executors import submit_runs, wait_for
    from benchmark.cli.status_table import print_status

    if args.executor == "slurm" and not args.profile:
        raise ProtobenchError("--executor slurm needs --profile: a cluster profile TOML "
                              "(slurm/profiles/example.toml to adapt, slurm/profiles/local.toml for the test cluster)")
    profile = load_profile(args.profile) if args.profile else ClusterProfile()
    device = None if args.device or not args.profile else profile.device
    submission = submit_runs(grid, runs, runs_root, cache_root, executor=args.executor, profile=profile,
                             device=device, retry_failed=args.retry_failed, rerun_stale=args.rerun_stale,
                             allow_code_change=args.allow_code_change, tensorboard_root=tensorboard_root)
    done = sum(o.state == "skipped" for o in submission.settled)
    print(f"grid {grid.name!r}: {len(runs)} runs → {runs_root / grid.name}; {done} already done")
    for o in submission.settled:
        if o.state not in ("skipped", "skipped-stale") and not o.failed:  # the others are listed by _summary
            print(f"  not submitted: {o.spec.run_id} {o.spec.label}: {o.detail}")
    for array in submission.arrays:
        ids = array.job_ids
        packed = f" packed into {len(ids)} task(s)" if len(array.specs) > len(ids) else ""
        print(f"submitted {len(array.specs)} run(s){packed} as job(s) {ids[0]}{f' … {ids[-1]}' if len(ids) > 1 else ''} "
              f"[{array.shape.describe()}]")
    if submission.snapshot:
        print(f"code snapshot: {submission.snapshot}")
    if not submission.arrays:
        print("nothing to submit")
        return _summary(submission.settled)
    if args.executor == "slurm":
        print(f"job logs: {submission.folder}\nfollow with `protobench status {runs_root / grid.name}`, "
              f"stop with `protobench cancel {runs_root / grid.name}`")
        return _summary(submission.settled)
    outcomes = wait_for(submission)
    print_status(runs_root / grid.name, adapters=AdapterImports.of_grid({spec.method for spec in grid.runs}))
    return _summary(submission.settled + outcomes)


def cmd_demo(args: argparse.Namespace) -> int:
    from benchmark.cli.demo_story import print_demo_story

    args.grid = str(demo_grid())
    status = cmd_run(args)
    if args.executor != "slurm":  # the others have finished their runs
        grid = load_grid(args.grid, overrides=grid_overrides(args))
        runs = select_runs(grid, args.only) if args.only else list(grid.runs)
        runs_root = runs_root_of(args, grid.runs_dir)
        print_demo_story(runs, [grid.run_dir(runs_root, spec) for spec in runs], runs_root / grid.name)
    return status


def cmd_evaluate(args: argparse.Namespace) -> int:
    from benchmark.run.reevaluate import reevaluate

    if args.robustness is not None:
        return cmd_robustness(args)

    result = reevaluate(Path(args.run_dir), map_pool=args.map_pool, cache_dir=args.cache_dir,
                        allow_code_change=args.allow_code_change, rescore=args.rescore)
    shown = "  ".join(f"{k}={v:.2f}" for k, v in result["metrics"].items() if v is not None)
    print(shown)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from benchmark.cli.status_table import print_status, status_records

    root = existing_runs_dir(args.runs_dir)
    dirs = find_run_dirs(root)
    queued = [rd for rd in dirs if not rd.is_complete and (job := latest_job(rd.path)) and job.executor == "slurm"]
    if queued and not slurm_available():
        print(f"note: {len(queued)} unfinished run(s) were submitted to SLURM, but SLURM commands are not on PATH here; "
              "showing their directories only", file=sys.stderr if args.json else sys.stdout)
        queued = []
    states = run_states(dirs, query_jobs) if queued else {}
    extra_states = {str(path): state.label for path, state in states.items()}
    if args.json:
        print(json.dumps(status_records(root, extra_states, adapter_imports(args)), indent=2, sort_keys=True,
                         default=str))
        return 0
    print_status(root, extra_states=extra_states, adapters=adapter_imports(args), wide=args.wide)
    for state in states.values():
        if state.label.startswith("failed (") and state.job:
            log = state.job.log_paths[1]
            print(f"{state.label}: job {state.job.job_id}" + (f", log {log}" if log.exists() else ", no log (it never started)"))
    return 0


def _cancel_targets(args: argparse.Namespace) -> tuple[str, list[RunDir]]:
    """The run directories ``cancel`` names: a grid file's runs, those under a directory, or the
    runs whose id starts with a prefix (under --runs-dir); and how to say which."""
    target = Path(args.target)
    if target.suffix == ".toml" and not target.is_file():  # a grid file that is not there: say so
        raise ProtobenchError(f"grid file {str(target)!r} does not exist{nearest_sibling(target)}; give the grid file `protobench run` "
                              "submitted, a runs directory (runs/GRID) or the start of a run id")
    if target.suffix == ".toml":
        grid = load_grid(target)
        root = runs_root_of(args, grid.runs_dir) / grid.name
        return f"grid {grid.name!r} ({root})", find_run_dirs(root) if root.is_dir() else []
    if target.is_dir():
        return str(target), find_run_dirs(target)
    root = existing_runs_dir(args.runs_dir or "runs")
    dirs = [rd for rd in find_run_dirs(root) if rd.path.name.startswith(args.target)]
    if not dirs:
        raise ProtobenchError(f"{args.target!r} is neither a grid file, a runs directory nor the start of a run id "
                              f"under {root}; give one of those (e.g. `protobench cancel runs/demo`)")
    return f"run(s) {args.target}* under {root}", dirs


def cmd_cancel(args: argparse.Namespace) -> int:
    from benchmark.robustness.grid_stage import live_stage_jobs
    from benchmark.run.store import STAGE_CANCELLED_FILE

    what, dirs = _cancel_targets(args)
    live = {path: state.job for path, state in run_states(dirs, query_jobs).items() if state.live and state.job}
    stage = live_stage_jobs(dirs, query_jobs)  # the robustness stage's jobs (protobench robustness GRID)
    # the runs of a packed task share its job
    jobs = sorted(dict.fromkeys(job.job_id for job in (*live.values(), *stage.values())),
                  key=lambda job_id: tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in job_id.split("_")))
    if not jobs:
        print(f"no pending or running SLURM job for {what}")
        return 0
    cancel_jobs(jobs)
    for path, job in live.items():
        record_cancelled(path, job)
    for path, job in stage.items():
        record_cancelled(path, job, STAGE_CANCELLED_FILE)
    for kind, cancelled, again in (("", live, "they read `cancelled`, and `protobench run`"),
                                   ("robustness-stage ", stage, "`protobench robustness`")):
        ids = [job_id for job_id in jobs if any(job.job_id == job_id for job in cancelled.values())]
        if ids:
            print(f"cancelled {len(ids)} {kind}job(s) of {len(cancelled)} run(s): {' '.join(ids)}; {again} of the "
                  "grid submits them again")
    return 0
