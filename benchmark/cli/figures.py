"""The commands that draw finished runs: ``plot`` (a metric against a key with seed error bars,
training curves, critical-difference diagrams, tuning histories), ``figures`` (prototype maps)
and ``tensorboard`` (training curves as TensorBoard scalars).

    protobench plot RUNS_DIR|CSV... --x J --y con [--hue method] [--facet backbone] --out FILE
    protobench plot --curves RUN_DIR... [--y TERM,...] --out FILE
    protobench plot --cd RUNS_DIR|CSV... [--y METRIC] [--hue KEY] --out FILE
    protobench figures RUN_DIR... --out DIR [--images N] [--top K]
    protobench tensorboard RUN_DIR... --out DIR

Building these parsers imports neither pandas nor matplotlib (every ``protobench`` command
builds them); the command bodies import what they use.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.cli.common import add_check_adapters_argument, adapter_imports
from benchmark.cli.results import DIMENSIONS, name_list, print_stale, add_where_argument
from benchmark.errors import ProtobenchError
from benchmark.run.identity import staleness
from benchmark.run.own_code import EVERY_ADAPTER
from benchmark.run.store import RunDir


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``plot``, ``figures`` and ``tensorboard`` to ``sub``."""
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
    p.add_argument("--style", type=_style, default="screen", metavar="STYLE",
                   help="screen (default) or paper: one column (3.5 in) or the text width (7.16 in), 8-pt text, "
                        "no title inside (the caption is printed); every PDF embeds TrueType fonts")
    p.set_defaults(func=cmd_figures)

    p = sub.add_parser("tensorboard", help="the training curves of runs (finished or not) from their metrics.jsonl "
                                           "as TensorBoard scalars")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories, or folders holding them (runs/demo)")
    p.add_argument("--out", required=True, help="TensorBoard log folder; each run goes to OUT/GRID/RUN_ID")
    p.set_defaults(func=cmd_tensorboard)


def _style(value: str):  # -> FigureStyle
    from reports.figure_style import figure_style

    try:
        return figure_style(value)
    except ProtobenchError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_plot_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``plot`` subcommand's arguments to ``parser``."""
    parser.add_argument("inputs", nargs="+", type=Path, metavar="RUNS_DIR|CSV|RUN_DIR",
                        help="folders searched recursively for result.json (or tidy CSVs); with --curves, "
                             "run directories (or folders holding them) with a metrics.jsonl")
    parser.add_argument("--tuning", action="store_true",
                        help="Optuna's optimisation history and hyperparameter importances of each study "
                             "(RUNS/GRID.tuning) as one PNG")
    parser.add_argument("--curves", action="store_true",
                        help="training curves from each run's metrics.jsonl: one panel per loss term, one line per run")
    parser.add_argument("--cd", action="store_true",
                        help="a critical-difference diagram: mean ranks of the --hue values (default: method) over the "
                             "blocks of the other keys, Friedman + Wilcoxon–Holm (docs/guides/statistics.md)")
    parser.add_argument("--x", metavar="DIM", help=f"x axis: one of {DIMENSIONS}, seed (default: J)")
    parser.add_argument("--y", type=name_list, metavar="NAME",
                        help="the metric to plot (default: acc); with --curves, the quantities, comma-separated: "
                             "loss terms, lr.GROUP, seconds (default: every loss term)")
    parser.add_argument("--hue", metavar="DIM", help="one line per value of this dimension, e.g. method")
    parser.add_argument("--facet", metavar="DIM", help="one panel per value of this dimension, e.g. backbone")
    add_where_argument(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="FILE.png, FILE.pdf or FILE.svg")
    add_check_adapters_argument(parser)
    parser.add_argument("--style", type=_style, default="screen", metavar="STYLE",
                        help="screen (default) or paper: one column (3.5 in) or the text width (7.16 in), 8-pt text, "
                             "no title inside (the caption is printed); every PDF embeds TrueType fonts")


def run_plot(args: argparse.Namespace) -> int:
    """Draw a metric against a dimension (mean ± seed spread) or, with --curves, training curves."""
    if args.tuning:
        from reports.tuning_plots import plot_tuning

        if args.out.suffix.lower() != ".png":
            raise ProtobenchError(f"--tuning writes a PNG; give --out {args.out.with_suffix('.png')}")
        print(f"wrote the optimisation histories and importances of {plot_tuning(args.inputs, args.out)} "
              f"study(ies) to {args.out}")
        return 0
    if args.curves:
        from reports.curves import plot_curves

        given = (("--x", args.x), ("--hue", args.hue), ("--facet", args.facet), ("--where", args.where))
        extra = [option for option, value in given if value]
        if extra:
            raise ProtobenchError(f"{', '.join(extra)} do not apply to --curves; drop them.")
        curves = plot_curves(args.inputs, args.out, quantities=args.y, style=args.style)
        print(f"wrote curves of {len(curves)} run(s) to {args.out}")
        return 0
    from benchmark.run.identity import mark_stale
    from reports.load import load_runs, stale_note
    from reports.pivot import parse_where
    from reports.plots import check_figure_path, plot_results

    if args.cd:
        return _run_cd(args)
    if args.y is not None and len(args.y) > 1:
        raise ProtobenchError(f"--y takes one metric, got {', '.join(args.y)}; make one plot per metric.")
    check_figure_path(args.out)
    frame = mark_stale(load_runs(args.inputs, parse_where(args.where)), adapter_imports(args))
    series = plot_results(frame, args.out, x=args.x or "J", y=(args.y or ["acc"])[0], hue=args.hue, facet=args.facet,
                          style=args.style)
    points = sum(len(s.points) for s in series)
    print(f"wrote {points} point(s) in {len(series)} series to {args.out}")
    if not args.style.titles:  # paper: the title's text is the caption's
        from reports.plots import plot_caption

        print("caption: " + plot_caption(frame, series, x=args.x or "J", hue=args.hue, facet=args.facet).replace("\u00a0", " "))
    for s in series:  # every point's n (the figure's error bars are the spread of these seeds)
        print(f"  {s.label}: " + ", ".join(f"{x}={p.x} n={p.n}" for p in s.points for x in [args.x or "J"]))
    print_stale(stale_note(zip(frame["run_dir"], frame["stale"]), frame.attrs.get("code_notes")))
    return 0


def _run_cd(args: argparse.Namespace) -> int:
    from reports.cd import plot_cd
    from reports.load import load_runs
    from reports.pivot import parse_where
    from reports.plots import check_figure_path

    extra = [option for option, value in (("--x", args.x), ("--facet", args.facet)) if value]
    if extra:
        raise ProtobenchError(f"{', '.join(extra)} do not apply to --cd (blocks are every other key); drop them.")
    if args.y is not None and len(args.y) > 1:
        raise ProtobenchError(f"--y takes one metric, got {', '.join(args.y)}; draw one diagram per metric.")
    check_figure_path(args.out)
    frame = load_runs(args.inputs, parse_where(args.where))
    cd = plot_cd(frame, args.out, metric=(args.y or ["acc"])[0], treatment=args.hue or "method", style=args.style)
    from reports.cd import treatment_labels

    shown = treatment_labels(frame, cd, args.hue or "method")  # the tables' names: not import paths, unique
    ranks = ", ".join(f"{t} {r:.2f}" for t, r in zip(shown, cd.mean_ranks))
    friedman = "" if cd.friedman_p is None else f"; Friedman p = {cd.friedman_p:.3g}"
    print(f"wrote the critical-difference diagram of {len(cd.treatments)} {args.hue or 'method'} value(s) over "
          f"{cd.n_blocks} block(s) to {args.out}: mean ranks {ranks}{friedman}")
    if not args.style.titles:
        from reports.cd import cd_caption

        print(f"caption: {cd_caption(cd, (args.y or ['acc'])[0], args.hue or 'method')}")
    if cd.incomplete_blocks:
        print(f"{cd.incomplete_blocks} block(s) left out: not every value has a result there", file=sys.stderr)
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from benchmark.run.explain import explain_run
    from benchmark.run.reevaluate import check_trained
    from reports.figures import run_labels, write_comparison, write_figures
    from reports.load import stale_note

    cache_dir = Path(args.cache_dir) if args.cache_dir else None
    run_dirs = [Path(d) for d in args.run_dirs]
    if args.images < 1 or args.top < 1:
        raise ProtobenchError(f"--images {args.images} and --top {args.top} must be ≥ 1")
    for run_dir in run_dirs:  # every run's imports and paths before the first run's compute
        check_trained(run_dir)
    explained = [explain_run(d, images=args.images, top_prototypes=args.top, cache_dir=cache_dir) for d in run_dirs]
    if len(run_dirs) == 1:
        written = write_figures(explained[0], Path(args.out), style=args.style)
    else:
        labels = run_labels([RunDir(d).spec() or {} for d in run_dirs],
                            [(RunDir(d).result() or {}).get("method_display_name") for d in run_dirs])
        written = write_comparison(list(zip(labels, explained)), Path(args.out), top=args.top, style=args.style)
    print(f"wrote {len(written)} files to {args.out}: " + ", ".join(p.name for p in written))
    note = stale_note((str(d), staleness(result, adapters=EVERY_ADAPTER, run_dir=d))  # figures run its code anyway
                      for d in run_dirs if (result := RunDir(d).result()) is not None)
    if note:  # a figure of a stale run shows another code's model
        print(note, file=sys.stderr)
    return 0


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from benchmark.run.epochlog import export_tensorboard

    written = export_tensorboard([Path(d) for d in args.run_dirs], Path(args.out))
    print(f"wrote the curves of {len(written)} run(s) to {args.out}; view with `tensorboard --logdir {args.out}`")
    return 0
