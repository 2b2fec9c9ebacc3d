"""protobench: train and evaluate part-prototype classifiers on frozen DINO trunks, grid by grid (make demo; see the README)."""
from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.errors import ProtobenchError
from benchmark.run.store import default_cache_root

if TYPE_CHECKING:
    from benchmark.config import RunSpec
    from benchmark.run.store import RunDir
    from benchmark.run.local import Outcome
    from benchmark.grid import GridSpec


def _demo_grid() -> Path:
    return Path(str(resources.files("benchmark") / "grids" / "demo.toml"))


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default unless it is unset (None, False, []) or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _grid_overrides(args: argparse.Namespace) -> dict[str, object]:
    from benchmark.grid import parse_set_options, parse_sweep_options

    overrides: dict[str, object] = parse_set_options(getattr(args, "set", None) or [])
    overrides.update(parse_sweep_options(getattr(args, "sweep", None) or []))
    if getattr(args, "data_root", None):
        overrides["data_root"] = args.data_root
    if getattr(args, "weights", None):
        overrides["weights"] = args.weights
    if getattr(args, "device", None):
        overrides["device"] = args.device
    if getattr(args, "no_cache", False):
        overrides["cache"] = False
    _check_data_root(overrides.get("data_root"))
    return overrides


def _check_data_root(data_root: object) -> None:
    """A data root given on the command line must exist: only a grid's own data_root makes the
    runner generate a synthbirds set (a typo would otherwise train on a fresh one)."""
    if isinstance(data_root, str) and not Path(data_root).expanduser().exists():
        raise ProtobenchError(
            f"data root {data_root!r} given on the command line does not exist; pass the folder the dataset was "
            f"extracted to. A synthbirds set is generated only where a grid file's data_root names it, or make "
            f"one there with `protobench make-data synthbirds --out {data_root}`")


def _tensorboard_root(args: argparse.Namespace) -> Path | None:
    """``--tensorboard DIR``, checked to be usable before any run starts."""
    if not getattr(args, "tensorboard", None):
        return None
    from benchmark.run.epochlog import summary_writer_class

    summary_writer_class()
    return Path(args.tensorboard)


def _runs_root(args: argparse.Namespace, grid_runs_dir: str) -> Path:
    return Path(args.runs_dir or grid_runs_dir)


def _cache_root(args: argparse.Namespace, runs_root: Path) -> Path:
    return Path(args.cache_dir) if args.cache_dir else default_cache_root(runs_root)


def cmd_run(args: argparse.Namespace) -> int:
    from benchmark.run.local import run_local
    from slurm.scheduler import query_jobs
    from benchmark.grid import load_grid, select_runs
    from benchmark.tools.status import print_status

    grid = load_grid(args.grid, overrides=_grid_overrides(args))
    runs = select_runs(grid, args.only) if args.only else list(grid.runs)
    runs_root = _runs_root(args, grid.runs_dir)
    cache_root = _cache_root(args, runs_root)
    _check_cache_space(runs, cache_root)  # before any compute
    tensorboard_root = _tensorboard_root(args)
    if args.executor != "local":
        return _submit(grid, runs, runs_root, cache_root, args, tensorboard_root)
    if args.profile:
        raise ProtobenchError("--profile only applies to submitted runs; add --executor slurm (or submitit-local)")
    print(f"grid {grid.name!r}: {len(runs)} runs → {runs_root / grid.name}", flush=True)
    outcomes = run_local(grid, runs, runs_root, cache_root, retry_failed=args.retry_failed,
                         rerun_stale=args.rerun_stale,
                         allow_code_change=args.allow_code_change, tensorboard_root=tensorboard_root,
                         ask=query_jobs)  # SLURM is asked only about runs submitted to it
    print_status(runs_root / grid.name)
    return _summary(outcomes)


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
        print(f"{len(stale)} run(s) of the grid have a stale result (README, \"Run identity and stale results\"); "
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
    from benchmark.cluster import ClusterProfile, load_profile
    from slurm.executors import submit_runs, wait_for
    from benchmark.tools.status import print_status

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
    print_status(runs_root / grid.name)
    return _summary(submission.settled + outcomes)


def cmd_demo(args: argparse.Namespace) -> int:
    from benchmark.tools.demo import print_demo_story
    from benchmark.grid import load_grid, select_runs

    args.grid = str(_demo_grid())
    status = cmd_run(args)
    if args.executor != "slurm":  # the others have finished their runs
        grid = load_grid(args.grid, overrides=_grid_overrides(args))
        runs = select_runs(grid, args.only) if args.only else list(grid.runs)
        runs_root = _runs_root(args, grid.runs_dir)
        print_demo_story(runs, [grid.run_dir(runs_root, spec) for spec in runs], runs_root / grid.name)
    return status


def _runs_dir(path: str) -> Path:
    root = Path(path)
    if not root.exists():
        raise ProtobenchError(f"runs directory {str(root)!r} does not exist; give the directory `protobench run` wrote to")
    return root


def cmd_status(args: argparse.Namespace) -> int:
    from benchmark.run.states import latest_job, run_states
    from slurm.scheduler import query_jobs, slurm_available
    from benchmark.tools.status import print_status
    from benchmark.run.store import find_run_dirs

    root = _runs_dir(args.runs_dir)
    dirs = find_run_dirs(root)
    queued = [rd for rd in dirs if not rd.is_complete and (job := latest_job(rd.path)) and job.executor == "slurm"]
    if queued and not slurm_available():
        print(f"note: {len(queued)} unfinished run(s) were submitted to SLURM, but SLURM commands are not on PATH here; "
              "showing their directories only", file=sys.stderr if args.json else sys.stdout)
        queued = []
    states = run_states(dirs, query_jobs) if queued else {}
    extra_states = {str(path): state.label for path, state in states.items()}
    if args.json:
        import json

        from benchmark.tools.status import status_records

        print(json.dumps(status_records(root, extra_states), indent=2, sort_keys=True, default=str))
        return 0
    print_status(root, extra_states=extra_states)
    for state in states.values():
        if state.label.startswith("failed (") and state.job:
            log = state.job.log_paths[1]
            print(f"{state.label}: job {state.job.job_id}" + (f", log {log}" if log.exists() else ", no log (it never started)"))
    return 0


def _cancel_targets(args: argparse.Namespace) -> tuple[str, list[RunDir]]:
    """The run directories ``cancel`` names: a grid file's runs, those under a directory, or the
    runs whose id starts with a prefix (under --runs-dir); and how to say which."""
    from benchmark.grid import load_grid
    from benchmark.run.store import find_run_dirs

    target = Path(args.target)
    if target.suffix == ".toml" and target.is_file():
        grid = load_grid(target)
        root = _runs_root(args, grid.runs_dir) / grid.name
        return f"grid {grid.name!r} ({root})", find_run_dirs(root) if root.is_dir() else []
    if target.is_dir():
        return str(target), find_run_dirs(target)
    root = _runs_dir(args.runs_dir or "runs")
    dirs = [rd for rd in find_run_dirs(root) if rd.path.name.startswith(args.target)]
    if not dirs:
        raise ProtobenchError(f"{args.target!r} is neither a grid file, a runs directory nor the start of a run id "
                              f"under {root}; give one of those (e.g. `protobench cancel runs/demo`)")
    return f"run(s) {args.target}* under {root}", dirs


def cmd_cancel(args: argparse.Namespace) -> int:
    from benchmark.run.states import record_cancelled, run_states
    from slurm.scheduler import cancel_jobs, query_jobs

    what, dirs = _cancel_targets(args)
    live = {path: state.job for path, state in run_states(dirs, query_jobs).items() if state.live and state.job}
    jobs = sorted(dict.fromkeys(job.job_id for job in live.values()),  # the runs of a packed task share its job
                  key=lambda job_id: tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in job_id.split("_")))
    if not jobs:
        print(f"no pending or running SLURM job for {what}")
        return 0
    cancel_jobs(jobs)
    for path, job in live.items():
        record_cancelled(path, job)
    print(f"cancelled {len(jobs)} job(s) of {len(live)} run(s): {' '.join(jobs)}; they read `cancelled`, and "
          "`protobench run` of the grid submits them again")
    return 0


def _check_cache_space(runs: list[RunSpec], cache_root: Path) -> None:
    """The token-cache entries the runs still need must fit in ``cache_root`` (ProtobenchError)."""
    from benchmark.cache.space import check_cache_space
    from benchmark.tools.plan import grid_cache_needs

    check_cache_space([need for need, _ in grid_cache_needs(runs)], cache_root)


def cmd_plan(args: argparse.Namespace) -> int:
    import dataclasses

    from benchmark.cluster import ClusterProfile, load_profile
    from benchmark.grid import load_grid, select_runs
    from benchmark.tools.plan import check_present_data, load_perf, make_plan, model_costs, print_plan

    grid = load_grid(args.grid, overrides=_grid_overrides(args))
    if args.only:
        grid = dataclasses.replace(grid, runs=tuple(select_runs(grid, args.only)))
    profile = load_profile(args.profile) if args.profile else ClusterProfile()
    device_model = args.device_model or profile.device_model
    costs = load_perf(args.perf, device_model) if args.perf else model_costs(device_model)
    check_present_data(grid.runs)
    print_plan(make_plan(grid, profile, costs))
    _print_plan_file_checks(grid)
    try:
        _check_cache_space(list(grid.runs), _cache_root(args, _runs_root(args, grid.runs_dir)))
    except ProtobenchError as warning:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _print_plan_file_checks(grid: GridSpec) -> None:
    """The doctor's data and weights checks, where the paths exist on this machine; placeholders
    flagged. A plan is an estimate, so its exit status stays 0 whatever they find."""
    from benchmark.tools.doctor import data_checks, weights_checks

    checks = data_checks(grid, absent_ok=True) + weights_checks(grid, absent_ok=True)
    for check in checks:
        print(check.line())
    if any(c.status == "fail" for c in checks):
        print(f"before submitting, fix the lines marked fail; `protobench doctor {grid.source}` checks the "
              "machine the jobs run on")


def cmd_doctor(args: argparse.Namespace) -> int:
    from benchmark.tools.doctor import print_checks, run_doctor
    from benchmark.grid import load_grid

    grid = load_grid(args.grid, overrides=_grid_overrides(args)) if args.grid else None
    cache_root = _cache_root(args, _runs_root(args, grid.runs_dir)) if grid else None
    return print_checks(run_doctor(grid, cache_root, slurm_required=args.slurm))


def cmd_make_data(args: argparse.Namespace) -> int:
    from benchmark.data import SYNTHBIRDS_DEFAULTS, generate_synthbirds

    if args.kind != "synthbirds":
        raise ProtobenchError(f"unknown generator {args.kind!r}; the suite generates 'synthbirds'")
    given = {"classes": args.classes, "images_per_class": args.images_per_class, "seed": args.seed}
    chosen = {**SYNTHBIRDS_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    out = generate_synthbirds(args.out, **chosen)
    print(f"wrote synthbirds ({chosen['classes']} classes × {chosen['images_per_class']} images, "
          f"seed {chosen['seed']}) to {out}")
    return 0


LIST_SECTIONS = ("methods", "backbones", "datasets", "grids")


def _listing(pattern: str | None, sections: tuple[str, ...]) -> dict[str, object]:
    """What ``protobench list`` shows, each section filtered by ``pattern`` (a case-insensitive
    substring or shell glob of the name); a pattern with ':' names a method by import path.
    Backbones: the aliases, and every ``timm:NAME`` trunk when a pattern or the section is given."""
    from fnmatch import fnmatch

    from benchmark.backbones import BACKBONES, list_backbones
    from benchmark.config import DATASET_NAMES
    from benchmark.method_lookup import get_method_class
    from methods.registry import list_methods, method_hyperparameters

    wildcard = pattern is not None and any(c in pattern for c in "*?[")

    def keep(name: str) -> bool:
        if pattern is None:
            return True
        return fnmatch(name.lower(), pattern.lower()) if wildcard else pattern.lower() in name.lower()

    methods = [pattern] if pattern and ":" in pattern else [m for m in list_methods() if keep(m)]
    grids = sorted(p.name for p in resources.files("benchmark").joinpath("grids").iterdir() if p.name.endswith(".toml"))
    if pattern is None and sections != ("backbones",):
        backbones = {k: spec.timm_name for k, spec in sorted(BACKBONES.items())}
    else:
        backbones = dict(list_backbones(None if pattern is None else pattern.lower() if wildcard
                                        else f"*{pattern.lower()}*"))
    return {
        "methods": {m: method_hyperparameters(get_method_class(m)) for m in methods},
        "backbones": backbones,
        "datasets": [d for d in DATASET_NAMES if keep(d)],
        "grids": [g for g in grids if keep(g)],
    }


def cmd_list(args: argparse.Namespace) -> int:
    import json

    terms = list(args.terms)
    sections = LIST_SECTIONS
    if terms and terms[0] in LIST_SECTIONS:
        sections = (terms.pop(0),)
    if len(terms) > 1:
        raise ProtobenchError(f"list takes one PATTERN, got {' '.join(terms)}; e.g. `protobench list vit` or "
                              "`protobench list methods proto`")
    shown = {k: v for k, v in _listing(terms[0] if terms else None, sections).items() if k in sections}
    if args.json:
        print(json.dumps(shown, indent=2, default=repr))
        return 0
    if not any(shown.values()):
        print(f"nothing named like {terms[0]!r} in {', '.join(sections)}")
        return 1
    for section, entries in shown.items():
        if not entries:
            continue
        if section == "methods":
            print("methods:")
            for name, params in entries.items():  # type: ignore[union-attr]
                print(f"  {name}: " + ", ".join(f"{k}={v!r}" for k, v in params.items()))
        elif section == "backbones":
            print("backbones:")
            for key, timm_name in entries.items():  # type: ignore[union-attr]
                print(f"  {key}: {timm_name}")
        else:
            where = " (benchmark/grids/)" if section == "grids" else ""
            print(f"{section}{where}:", ", ".join(entries))  # type: ignore[arg-type]
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from benchmark.run.reevaluate import reevaluate

    result = reevaluate(Path(args.run_dir), map_pool=args.map_pool, cache_dir=args.cache_dir,
                        allow_code_change=args.allow_code_change, rescore=args.rescore)
    shown = "  ".join(f"{k}={v:.2f}" for k, v in result["metrics"].items() if v is not None)
    print(shown)
    return 0


def cmd_perf(args: argparse.Namespace) -> int:
    import json

    from benchmark.grid import load_grid, select_runs
    from benchmark.tools.perf import measure, paper_scale_grid, prepare_sharing_trunks, print_perf
    from benchmark.run.store import atomic_write_bytes

    if args.paper_scale and args.grid:
        raise ProtobenchError("perf takes a grid file or --paper-scale, not both")
    if args.timed_batches < 1 or args.warmup < 0:
        raise ProtobenchError(f"--timed-batches {args.timed_batches} must be ≥ 1 and --warmup {args.warmup} ≥ 0")
    if args.paper_scale:
        grid = paper_scale_grid(overrides=_grid_overrides(args))
        runs = select_runs(grid, args.only) if args.only else list(grid.runs)
    else:
        grid = load_grid(args.grid or _demo_grid(), overrides=_grid_overrides(args))
        runs = select_runs(grid, args.only) if args.only else [grid.runs[0]]
    methods = [spec.method for spec in runs]
    baseline = args.baseline or methods[0]
    if baseline not in methods:
        raise ProtobenchError(f"--baseline {baseline!r} is not a method of the selected runs ({', '.join(methods)})")
    cache_root = _cache_root(args, _runs_root(args, grid.runs_dir))
    rows = measure(prepare_sharing_trunks(runs), cache_root, warmup=args.warmup, timed_batches=args.timed_batches,
                   baseline=methods.index(baseline))
    print_perf(rows, methods.index(baseline))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out, (json.dumps(rows, indent=2) + "\n").encode())
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from benchmark.run.identity import staleness
    from benchmark.tools.explain import explain_run
    from benchmark.run.store import RunDir
    from reports.figures import run_labels, write_comparison, write_figures
    from reports.load import stale_note

    from benchmark.run.reevaluate import check_trained

    cache_dir = Path(args.cache_dir) if args.cache_dir else None
    run_dirs = [Path(d) for d in args.run_dirs]
    if args.images < 1 or args.top < 1:
        raise ProtobenchError(f"--images {args.images} and --top {args.top} must be ≥ 1")
    for run_dir in run_dirs:  # every run's imports and paths before the first run's compute
        check_trained(run_dir)
    explained = [explain_run(d, images=args.images, top_prototypes=args.top, cache_dir=cache_dir) for d in run_dirs]
    if len(run_dirs) == 1:
        written = write_figures(explained[0], Path(args.out))
    else:
        labels = run_labels([RunDir(d).spec() or {} for d in run_dirs],
                            [(RunDir(d).result() or {}).get("method_display_name") for d in run_dirs])
        written = write_comparison(list(zip(labels, explained)), Path(args.out), top=args.top)
    print(f"wrote {len(written)} files to {args.out}: " + ", ".join(p.name for p in written))
    note = stale_note((str(d), staleness(result)) for d in run_dirs if (result := RunDir(d).result()) is not None)
    if note:  # a figure of a stale run shows another code's model
        print(note, file=sys.stderr)
    return 0


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from benchmark.run.epochlog import export_tensorboard

    written = export_tensorboard([Path(d) for d in args.run_dirs], Path(args.out))
    print(f"wrote the curves of {len(written)} run(s) to {args.out}; view with `tensorboard --logdir {args.out}`")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from datetime import datetime

    from benchmark.cache.admin import list_cache, remove_cache, verify_cache

    cache_dir = _cache_root(args, Path(args.runs_dir))
    if args.action == "ls":
        items = list_cache(cache_dir)
        for item in items:
            used = datetime.fromtimestamp(item.last_used).isoformat(sep=" ", timespec="minutes")
            print(f"{item.name}  {item.bytes / 2**20:.1f} MiB  {item.state}  built {item.built_by}  last used {used}")
        print(f"{cache_dir}: {len(items)} folder(s), {sum(i.bytes for i in items) / 2**30:.2f} GiB")
        return 0
    if args.action == "verify":
        problems = verify_cache(cache_dir, args.names)
        for name, found in problems.items():
            print(f"{name}: {'ok' if not found else 'CORRUPT: ' + '; '.join(found)}")
        bad = [name for name, found in problems.items() if found]
        if bad:
            print(f"{len(bad)} corrupt: remove with `protobench cache rm {' '.join(bad)} --cache-dir {cache_dir}`",
                  file=sys.stderr)
        return 1 if bad else 0
    if args.unused is not None and args.unused < 0:
        raise ProtobenchError(f"--unused {args.unused} must be ≥ 0 days")
    for line in remove_cache(cache_dir, args.names, args.unused):
        print(line)
    return 0


class _Parser(argparse.ArgumentParser):
    """The parser of protobench and of each command: defaults shown in ``--help``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("protobench")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def add_grid_options(p: argparse.ArgumentParser) -> None:
    """What every grid-reading command takes: overrides of the grid's fields."""
    p.add_argument("--data-root", help="dataset root for every run (overrides the grid; must exist)")
    p.add_argument("--weights", help="'hf-cache', 'random' or a weights file for every run (replaces the grid's "
                                     "weights, a string or a table by backbone)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a RunSpec field or method_args.NAME in every run, or METHOD.NAME in that "
                        "method's runs; VALUE is a TOML literal (--set batch_size=64 --set vmfproto.lambda_ppd=0.5); "
                        "repeatable")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,…",
                   help="add an axis to the grid: every run once per value (--sweep seed=0,1,2 "
                        "--sweep vmfproto.lambda_ppd=0.1,0.5); keys as --set's; repeatable")


def add_only_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", nargs="+", default=[], metavar="KEY=VALUE|RUN_ID",
                   help="a subset: method=vmfproto J=3,5 seed=0 … (comma lists keep any of the values; "
                        "J is prototypes_per_class) or run-id prefixes")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """What every command that trains or measures runs takes."""
    add_only_option(p)
    add_grid_options(p)
    p.add_argument("--runs-dir", help="where run directories go (default: the grid's runs_dir, 'runs')")
    p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
    p.add_argument("--device", help="'cpu', 'cuda', 'cuda:N' (default: the grid's, 'auto')")
    p.add_argument("--no-cache", action="store_true", help="recompute the trunk every epoch (no token cache)")


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="protobench", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run (or resume) every run of a grid")
    p.add_argument("grid", help="grid TOML file, e.g. benchmark/grids/demo.toml")
    add_run_options(p)
    add_execution_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="the demo grid on generated synthbirds, locally")
    add_run_options(p)
    add_execution_options(p)
    p.set_defaults(func=cmd_demo)

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
    add_run_options(p)
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser("status", help="table of the runs under a runs directory, with their SLURM job states")
    p.add_argument("runs_dir", help="a directory `protobench run` wrote to (e.g. runs/ or runs/demo)")
    p.add_argument("--json", action="store_true", help="print one JSON record per run (state, spec, metrics)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("cancel", help="scancel the pending or running SLURM jobs of a grid, a runs directory or runs")
    p.add_argument("target", help="a grid TOML file, a directory `protobench run --executor slurm` wrote to "
                                  "(runs/GRID, runs/GRID/RUN_ID) or the start of a run id")
    p.add_argument("--runs-dir", help="where a grid's or a run id's runs are (default: the grid's runs_dir, 'runs')")
    p.set_defaults(func=cmd_cancel)

    from benchmark.tools.costmodel import DEVICES

    p = sub.add_parser("plan", help="runs, job arrays, token caches and GPU-hours of a grid, before submitting")
    p.add_argument("grid", help="grid TOML file, e.g. benchmark/grids/cub_main.toml")
    p.add_argument("--profile", help="cluster profile TOML: job shapes (default: one shape)")
    p.add_argument("--perf", help="per-epoch costs measured by `protobench perf --out FILE` "
                                  "from the target device (default: the FLOPs-and-bytes model)")
    p.add_argument("--device-model", choices=sorted(DEVICES),
                   help="the GPU the cost model assumes (default: the profile's device_model, H100)")
    add_only_option(p)
    add_grid_options(p)
    p.add_argument("--runs-dir", help="where run directories go (default: the grid's runs_dir, 'runs')")
    p.add_argument("--cache-dir", help="token cache directory whose free space is checked "
                                       "(default: RUNS_DIR/.token-cache)")
    p.set_defaults(func=cmd_plan)

    from reports.cli import (
        add_compare_arguments,
        add_export_arguments,
        add_plot_arguments,
        add_report_arguments,
        run_compare,
        run_export,
        run_plot,
        run_report,
    )

    p = sub.add_parser("report", help="tables (markdown/LaTeX/CSV) of every result, or of a paper layout")
    add_report_arguments(p)
    p.set_defaults(func=run_report)

    p = sub.add_parser("export", help="one flat row per run (spec, metrics, timings, …) to CSV/JSONL/Parquet")
    add_export_arguments(p)
    p.set_defaults(func=run_export)

    p = sub.add_parser("compare", help="paired comparisons of one key's values (method, J, …): differences, CIs, "
                                       "Holm-corrected p-values")
    add_compare_arguments(p)
    p.set_defaults(func=run_compare)

    p = sub.add_parser("plot", help="a metric against J, backbone, … with seed error bars; --curves: training curves")
    add_plot_arguments(p)
    p.set_defaults(func=run_plot)

    p = sub.add_parser("figures", help="prototype-map figures of finished runs: one run's panels per image, or "
                                       "several runs side by side on the same test images")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="finished runs' directories (runs/GRID/RUN_ID); several: one comparison figure")
    p.add_argument("--images", type=int, default=4, help="how many test images (spread over the split)")
    p.add_argument("--top", type=int, default=3, help="prototypes shown per run and image (by peak or contribution)")
    p.add_argument("--out", required=True, help="output directory (PNG and vector PDF)")
    p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
    p.set_defaults(func=cmd_figures)

    p = sub.add_parser("tensorboard", help="the training curves of runs (finished or not) from their metrics.jsonl "
                                           "as TensorBoard scalars")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories, or folders holding them (runs/demo)")
    p.add_argument("--out", required=True, help="TensorBoard log folder; each run goes to OUT/GRID/RUN_ID")
    p.set_defaults(func=cmd_tensorboard)

    p = sub.add_parser("doctor", help="check this machine for a grid: Python/torch/CUDA, data, weights, disk, SLURM")
    p.add_argument("grid", nargs="?", help="grid TOML whose data roots, weights and caches to check "
                                           "(none: the machine only)")
    add_grid_options(p)
    p.add_argument("--runs-dir", help="where run directories go (default: the grid's runs_dir, 'runs')")
    p.add_argument("--cache-dir", help="token cache directory whose free disk to check (default: RUNS_DIR/.token-cache)")
    p.add_argument("--slurm", action="store_true", help="SLURM commands missing is a failure, not a warning")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("make-data", help="generate a synthetic CUB-format dataset")
    p.add_argument("kind", help="what to generate: synthbirds")
    p.add_argument("--out", required=True, help="folder to write the dataset to")
    for option in ("classes", "images-per-class", "seed"):
        p.add_argument(f"--{option}", type=int, help="default: synthbirds.SYNTHBIRDS_DEFAULTS, printed when written")
    p.set_defaults(func=cmd_make_data)

    p = sub.add_parser("list", help="methods (with hyperparameters), backbones, datasets, grids; "
                                    "[SECTION] [PATTERN] to filter (`list backbones PATTERN`: every timm ViT as timm:NAME too)")
    p.add_argument("terms", nargs="*", metavar="[SECTION] [PATTERN]",
                   help=f"a section ({', '.join(LIST_SECTIONS)}) and/or a name pattern: a case-insensitive "
                        "substring or glob (vit, 'dinov2_*'); a method's import path (mypkg.mod:MyMethod) shows it")
    p.add_argument("--json", action="store_true", help="print the listing as one JSON object")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("cache", help="token-cache entries: ls, verify (rehash every block), rm (names or --unused)")
    p.add_argument("action", choices=["ls", "verify", "rm"],
                   help="ls: list entries; verify: rehash every block; rm: remove entries")
    p.add_argument("names", nargs="*", metavar="NAME", help="entry names, name prefixes or key digests "
                                                            "(verify: default every entry)")
    p.add_argument("--unused", nargs="?", const=30.0, type=float, metavar="DAYS",
                   help="rm: also entries not opened for DAYS days (default 30), dead builds and idle entries "
                        "moved aside")
    p.add_argument("--runs-dir", default="runs", help="runs directory whose .token-cache to use (default: runs)")
    p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
    p.set_defaults(func=cmd_cache)

    p = sub.add_parser("evaluate", help="re-evaluate a finished run from its checkpoint")
    p.add_argument("run_dir", help="a finished run's directory (runs/GRID/RUN_ID)")
    p.add_argument("--map-pool", type=int, choices=[1, 2], help="override the run's map_pool")
    p.add_argument("--cache-dir", help="token cache directory (default: RUNS_DIR/.token-cache)")
    p.add_argument("--allow-code-change", action="store_true",
                   help="re-evaluate even though the method's code changed since the run trained (stale)")
    p.add_argument("--rescore", action="store_true",
                   help="replace the scores in the run's result.json with the current metric code's (a result "
                        "scored by earlier metric code is flagged by report/plot/export until then)")
    p.set_defaults(func=cmd_evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ProtobenchError as err:
        print(f"protobench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a run stopped mid-way resumes from its last checkpoint
        print("protobench: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
