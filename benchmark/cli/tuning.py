"""The command that tunes a grid's methods on the validation split: ``tune``."""
from __future__ import annotations

import argparse
import math
import time

from benchmark.cli.common import add_grid_options, add_only_option, cache_root_of, grid_overrides, runs_root_of
from benchmark.errors import ProtobenchError
from benchmark.grid import load_grid, select_runs


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``tune`` to ``sub``."""
    from benchmark.tuning.config import BATCH_STEPS  # no torch; imported when the parser is built (reports' floor)
    from methods.registry import batching_methods  # the declarations only (no torch), when the parser is built

    p = sub.add_parser("tune", help="tune every method of a grid on the validation split, with the same budget each "
                                    "(one Optuna study per dataset × backbone × method × J × variant)")
    p.add_argument("grid", help="grid TOML file (its [tuning] table: docs/guides/tuning.md)")
    p.add_argument("--trials", type=int, help="finished (complete or pruned) trials per cell, the same for every "
                                              "method (default: the grid's tuning.trials)")
    p.add_argument("--sampler", choices=["tpe", "random", "nsga2"], help="Optuna sampler (default: the grid's, tpe)")
    p.add_argument("--prune", action=argparse.BooleanOptionalAction, default=None,
                   help="stop a trial early when Optuna's MedianPruner judges its validation accuracy after an "
                        "epoch below the median of the complete trials' (one objective, acc; a pruned trial "
                        "counts towards --trials; --no-prune: off whatever the grid says; default: the grid's "
                        "tuning.prune, off)")
    p.add_argument("--batch", type=int, default=1, metavar="K",
                   help="ask K trials at once and train them together over shared token batches, each still an "
                        f"ordinary trial (the suite's methods that declare it: {', '.join(batching_methods())}; "
                        "an installed method as it declares; the others run one by one and say so; the "
                        "sampler's TPE then uses constant liar; default 1)")
    p.add_argument("--batch-step", choices=BATCH_STEPS, default="auto",
                   help="the step of a batch: one vectorised pass over the K parameter sets (torch.func.vmap) or "
                        "each trial's own step on the shared batch; auto: vectorised on a GPU, per member on a CPU")
    add_grid_options(p)
    add_only_option(p)
    p.add_argument("--runs-dir", help="where the studies and trial runs go: RUNS_DIR/GRID.tuning "
                                      "(default: the grid's runs_dir, 'runs')")
    p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
    p.add_argument("--device", help="'cpu', 'cuda', 'cuda:N' (default: the grid's, 'auto')")
    p.add_argument("--no-cache", action="store_true", help="recompute the trunk every epoch (no token cache)")
    p.add_argument("--executor", default="local", choices=["local", "submitit-local", "slurm"],
                   help="local: one worker in this process; slurm / submitit-local: --workers array tasks that "
                        "share the studies")
    p.add_argument("--workers", type=int, default=1, help="array tasks for --executor slurm|submitit-local")
    p.add_argument("--profile", help="cluster profile TOML for --executor slurm (slurm/profiles/)")
    p.add_argument("--heartbeat-seconds", type=float, default=10.0,
                   help="a running trial's worker beats this often; one silent for 6 beats is failed and retried")
    p.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.heartbeat_seconds) and args.heartbeat_seconds > 0):
        raise ProtobenchError(f"--heartbeat-seconds {args.heartbeat_seconds} must be a finite number > 0")
    if args.workers < 1:
        raise ProtobenchError(f"--workers {args.workers} must be ≥ 1")
    if args.batch < 1:
        raise ProtobenchError(f"--batch {args.batch} must be ≥ 1 (the trials trained together; 1: one at a time)")
    grid = load_grid(args.grid, overrides=grid_overrides(args))  # a refused grid costs no torch import
    from benchmark.tuning.config import describe_space, tuning_cells, tuning_config
    from benchmark.tuning.study import check_existing_studies, describe_pruner, pruner
    from benchmark.tuning.trials import failure_budget
    from benchmark.tuning.workers import TuneJob, tuning_root

    runs = select_runs(grid, args.only) if args.only else list(grid.runs)
    config = tuning_config(grid, trials=args.trials, sampler=args.sampler, prune=args.prune)
    if config.trials is None:
        raise ProtobenchError(f"{args.grid}: how many trials? pass --trials N or set trials in the grid's [tuning]")
    cells = tuning_cells(grid, runs, config)
    runs_root = runs_root_of(args, grid.runs_dir)
    root = tuning_root(runs_root, grid.name)
    check_existing_studies(root, cells)  # a study tuned with the other pruning setting: refused before compute
    pruning = f"pruning on ({describe_pruner(pruner(True))}; a pruned trial counts)" if config.prune \
        else "pruning off"
    print(f"grid {grid.name!r}: {len(cells)} tuning cell(s) → {root}; budget: {config.trials} finished trials per "
          f"cell, every method alike, {pruning}, sampler {config.sampler}, objective(s) "
          f"{', '.join(config.objectives)} on the validation split ({config.validation_fraction:g} of each class, "
          f"seed {config.validation_seed}); a failed trial is recorded and another asked, up to "
          f"{failure_budget(config.trials)} failures per cell"
          + (f"; up to {args.batch} trials trained together (TPE with constant liar)" if args.batch > 1 else ""))
    for cell in cells:
        held = ", ".join(f"{name} = {cell.base.method_args[name]!r}" for name in cell.held)
        print(f"  {cell.label}: {cell.epoch_budget} epochs per trial; space: {describe_space(cell.space)}"
              + ("" if cell.space else " — tuned over nothing: one trial, the defaults")
              + (f"; held by the variant: {held}" if held else ""))
    job = TuneJob(args.grid, grid_overrides(args), tuple(args.only), config.trials, config.sampler, runs_root,
                  cache_root_of(args, runs_root) if not args.no_cache else None, args.heartbeat_seconds, config.prune,
                  args.batch, args.batch_step)
    tic = time.perf_counter()
    if args.executor == "local":
        if args.workers != 1 or args.profile:
            raise ProtobenchError("--workers and --profile apply to --executor slurm|submitit-local")
        summaries = job()
    else:
        from slurm.tuning import submit_tune_workers

        summaries = submit_tune_workers(job, executor=args.executor, workers=args.workers, profile=args.profile,
                                        folder=root / "jobs")
    for record in summaries:
        best, default = record["best"], record["default"]
        print(f"{record['study']}: {record['complete']}/{record['budget']['trials']} complete, "
              f"{_pruned(record)} ({record['budget']['epochs_per_trial']} epochs each at most); default "
              f"{_value(default)}, best {_value(best)} (trial {best['number'] if best else '-'})")
    print(f"tuned in {time.perf_counter() - tic:.1f} s; summaries: {root}/*/summary.json")
    return 0 if all(r["finished"] >= r["budget"]["trials"] for r in summaries) else 1


def _pruned(record: dict) -> str:
    pruning = record["pruning"]
    if not pruning["on"]:
        return "pruning off"
    return (f"{pruning['pruned']} pruned (pruning on: {pruning['epochs_trained']} of "
            f"{record['budget']['trials'] * record['budget']['epochs_per_trial']} epochs trained)")


def _value(trial: dict | None) -> str:
    if not trial or not trial.get("values"):
        return "-"
    return "/".join(f"{v:.2f}" for v in trial["values"])



