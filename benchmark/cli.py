"""The ``protobench`` command line."""
from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from benchmark.errors import ProtobenchError


def _demo_grid() -> Path:
    return Path(str(resources.files("benchmark") / "grids" / "demo.toml"))


def _grid_overrides(args: argparse.Namespace) -> dict[str, object]:
    overrides: dict[str, object] = {}
    if getattr(args, "data_root", None):
        overrides["data_root"] = args.data_root
    if getattr(args, "device", None):
        overrides["device"] = args.device
    if getattr(args, "no_cache", False):
        overrides["cache"] = False
    return overrides


def _runs_root(args: argparse.Namespace, grid_runs_dir: str) -> Path:
    return Path(args.runs_dir or grid_runs_dir)


def cmd_run(args: argparse.Namespace) -> int:
    from benchmark.executors import run_local
    from benchmark.grid import load_grid, select_runs
    from benchmark.status import print_status

    grid = load_grid(args.grid, overrides=_grid_overrides(args))
    runs = select_runs(grid, args.only) if args.only else list(grid.runs)
    runs_root = _runs_root(args, grid.runs_dir)
    cache_root = Path(args.cache_dir) if args.cache_dir else runs_root / ".token-cache"
    if args.executor != "local":
        from benchmark.slurm_submit import submit_grid

        return submit_grid(grid, runs, runs_root, cache_root, args)
    print(f"grid {grid.name!r}: {len(runs)} runs → {runs_root / grid.name}", flush=True)
    outcomes = run_local(grid, runs, runs_root, cache_root, retry_failed=args.retry_failed)
    print_status(runs_root / grid.name)
    failed = [o for o in outcomes if o.state == "failed"]
    for o in failed:
        print(f"failed: {o.spec.run_id} {o.spec.label}: {o.detail}", file=sys.stderr)
    return 1 if failed else 0


def cmd_demo(args: argparse.Namespace) -> int:
    args.grid = str(_demo_grid())
    return cmd_run(args)


def cmd_status(args: argparse.Namespace) -> int:
    from benchmark.status import print_status

    root = Path(args.runs_dir)
    if not root.exists():
        raise ProtobenchError(f"runs directory {str(root)!r} does not exist; give the directory `protobench run` wrote to")
    print_status(root)
    return 0


def cmd_make_data(args: argparse.Namespace) -> int:
    from benchmark.data import generate_synthbirds

    if args.kind != "synthbirds":
        raise ProtobenchError(f"unknown generator {args.kind!r}; the suite generates 'synthbirds'")
    out = generate_synthbirds(args.out, classes=args.classes, images_per_class=args.images_per_class, seed=args.seed)
    print(f"wrote synthbirds ({args.classes} classes × {args.images_per_class} images, seed {args.seed}) to {out}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from benchmark.backbones import BACKBONES
    from benchmark.config import DATASET_NAMES
    from methods.registry import get_method_class, list_methods, method_hyperparameters

    print("methods:")
    for name in list_methods():
        params = ", ".join(f"{k}={v!r}" for k, v in method_hyperparameters(get_method_class(name)).items())
        print(f"  {name}: {params}")
    print("backbones:")
    for key, spec in sorted(BACKBONES.items()):
        print(f"  {key}: {spec.timm_name}")
    print("datasets:", ", ".join(DATASET_NAMES))
    grids = sorted(p.name for p in resources.files("benchmark").joinpath("grids").iterdir() if p.name.endswith(".toml"))
    print("grids (benchmark/grids/):", ", ".join(grids))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from benchmark.reevaluate import reevaluate

    result = reevaluate(Path(args.run_dir), map_pool=args.map_pool, cache_dir=args.cache_dir)
    shown = "  ".join(f"{k}={v:.2f}" for k, v in result["metrics"].items() if v is not None)
    print(shown)
    return 0


def cmd_perf(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from benchmark.grid import load_grid, select_runs
    from benchmark.perf import measure
    from benchmark.runner import prepare

    grid = load_grid(args.grid or _demo_grid(), overrides=_grid_overrides(args))
    runs = select_runs(grid, args.only) if args.only else [grid.runs[0]]
    cache_root = Path(args.cache_dir) if args.cache_dir else _runs_root(args, grid.runs_dir) / ".token-cache"
    rows = [measure(prepare(spec), cache_root) for spec in runs]
    base = rows[0]
    table = Table(title=f"protobench perf ({rows[0]['device']}, batch {rows[0]['batch_size']})")
    for col in ("run", "trunk img/s", "method img/s", "method/trunk", "epoch cached s", "epoch live s",
                "live/cached", "epoch vs first row"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for r in rows:
        table.add_row(r["run"], f"{r['trunk_images_per_second']:.1f}", f"{r['method_inference_images_per_second']:.1f}",
                      f"{r['inference_ratio_method_over_trunk']:.3f}", f"{r['epoch_seconds_from_cache']:.3f}",
                      f"{r['epoch_seconds_recomputing_trunk']:.3f}", f"{r['epoch_speedup_from_cache']:.1f}×",
                      f"{r['epoch_seconds_from_cache'] / base['epoch_seconds_from_cache']:.2f}×")
    Console().print(table)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="protobench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def add_run_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--only", nargs="+", default=[], metavar="KEY=VALUE|RUN_ID",
                       help="run a subset: method=vmfproto seed=0 … or run-id prefixes")
        p.add_argument("--data-root", help="dataset root for every run (overrides the grid)")
        p.add_argument("--runs-dir", help="where run directories go (default: the grid's runs_dir, 'runs')")
        p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
        p.add_argument("--device", help="'cpu', 'cuda', 'cuda:N' (default: the grid's, 'auto')")
        p.add_argument("--no-cache", action="store_true", help="recompute the trunk every epoch (no token cache)")
        p.add_argument("--retry-failed", action="store_true", help="run again the runs that failed before")
        p.add_argument("--executor", default="local", choices=["local", "submitit-local", "debug", "slurm"],
                       help="where runs execute (default: local, in this process)")
        p.add_argument("--profile", help="cluster profile TOML for --executor slurm (slurm/profiles/)")

    p = sub.add_parser("run", help="run (or resume) every run of a grid")
    p.add_argument("grid", help="grid TOML file, e.g. benchmark/grids/demo.toml")
    add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="the demo grid on generated synthbirds, locally")
    add_run_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("perf", help="timings side by side: trunk, method inference, cached vs live epochs")
    p.add_argument("grid", nargs="?", help="grid TOML (default: the demo grid); the first run, or --only runs")
    p.add_argument("--out", help="also write the measurements as JSON")
    add_run_options(p)
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser("status", help="table of the runs under a runs directory")
    p.add_argument("runs_dir")
    p.set_defaults(func=cmd_status)

    from reports.cli import add_report_arguments, run_report

    p = sub.add_parser("report", help="paper tables (LaTeX/markdown) from result.json files or a CSV")
    add_report_arguments(p)
    p.set_defaults(func=run_report)

    p = sub.add_parser("make-data", help="generate a synthetic CUB-format dataset")
    p.add_argument("kind", help="synthbirds")
    p.add_argument("--out", required=True)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--images-per-class", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_make_data)

    p = sub.add_parser("list", help="methods (with hyperparameters), backbones, datasets, grids")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("evaluate", help="re-evaluate a finished run from its checkpoint")
    p.add_argument("run_dir")
    p.add_argument("--map-pool", type=int, choices=[1, 2], help="override the run's map_pool")
    p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
    p.set_defaults(func=cmd_evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ProtobenchError as err:
        print(f"protobench: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
