"""``protobench report``, ``export`` and ``plot``: arguments and command bodies for the CLI to mount.

    protobench report RUNS_DIR|CSV... [--layout NAME] [--format latex|markdown|csv] [--against CSV]
                      [--rows DIMS] [--cols DIMS] [--metrics NAMES] [--where KEY=VALUE]...
                      [--decimals N] [--method-macro] [--out FILE]
    protobench report --list
    protobench export RUNS_DIR... --out FILE.csv|.jsonl|.parquet
    protobench plot RUNS_DIR|CSV... --x J --y con [--hue method] [--facet backbone] --out FILE
    protobench plot --curves RUN_DIR... [--y TERM,...] --out FILE

Building these parsers imports neither pandas nor matplotlib (every ``protobench`` command
builds them); the command bodies import what they use.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.errors import ProtobenchError
from reports.layouts import get_layout, list_layouts

#: the keys of ``reports.render.WRITERS``, spelt here so that building the CLI parser does not
#: import pandas (every ``protobench`` command builds it; only ``report`` renders)
FORMATS: tuple[str, ...] = ("latex", "markdown", "csv")
DIMENSIONS = "dataset, backbone, method, J, variant"


def _names(value: str) -> list[str]:
    """``"method,J"`` → ``["method", "J"]`` (argparse type of the comma-list options)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more names separated by commas")
    return names


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``."""
    parser.add_argument("runs_dirs", nargs="*", type=Path, metavar="RUNS_DIR|CSV",
                        help="folders searched recursively for result.json, or tidy CSV files "
                             "(e.g. reports/paper/cub_main.csv to regenerate the paper's table)")
    parser.add_argument("--layout", metavar="NAME",
                        help="one of the paper's tables (see --list); without it, every result pivoted")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="markdown",
                        help="output format (default: markdown)")
    parser.add_argument("--rows", type=_names, metavar="DIMS",
                        help=f"without --layout: row dimensions, comma-separated, of {DIMENSIONS} "
                             "(default: method,J,variant, those that vary)")
    parser.add_argument("--cols", type=_names, metavar="DIMS",
                        help="without --layout: column dimensions (default: dataset,backbone, those that vary); "
                             "metrics are the innermost columns")
    parser.add_argument("--metrics", type=_names, metavar="NAMES",
                        help="without --layout: metrics to show, of con, sta, dis, comp, acc, epoch_seconds, "
                             "inference_images_per_second (default: those of con…acc that any result has)")
    add_where_argument(parser)
    parser.add_argument("--method-macro", action="store_true",
                        help="LaTeX: write vMFProto as the paper's \\method{} macro")
    parser.add_argument("--against", type=Path, metavar="CSV",
                        help="published numbers to show next to ours, e.g. reports/paper/cub_main.csv")
    parser.add_argument("--decimals", type=int, default=1, help="digits after the point (default: 1)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the table here instead of stdout")
    parser.add_argument("--list", dest="list_layouts", action="store_true", help="list the layouts and exit")


def run_report(args: argparse.Namespace) -> int:
    """Render one table (or list layouts). Missing cells are listed on stderr; returns 0."""
    from reports.coverage import left_out_message
    from reports.load import load_csv, load_runs, stale_note
    from reports.pivot import parse_where, pivot_layout
    from reports.render import render_report

    if args.list_layouts:
        layouts = list_layouts()
        width = max(len(name) for name, _ in layouts)
        for name, description in layouts:
            print(f"{name:<{width}}  {description}")
        return 0
    shaped = [o for o, v in (("--rows", args.rows), ("--cols", args.cols), ("--metrics", args.metrics)) if v]
    if args.layout is not None and shaped:
        raise ProtobenchError(
            f"{', '.join(shaped)} shape the table of every result; drop them, or drop --layout {args.layout}."
        )
    layout = get_layout(args.layout) if args.layout is not None else None
    where = parse_where(args.where)
    frame = load_runs(args.runs_dirs, where)
    if layout is None:
        layout = pivot_layout(frame, rows=args.rows, cols=args.cols, metrics=args.metrics)
    against = load_csv(args.against) if args.against is not None else None
    report = render_report(
        frame, layout, args.fmt, against=against, decimals=args.decimals, method_macro=args.method_macro
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report.text, encoding="utf-8")
    else:
        sys.stdout.write(report.text)
    if report.missing and args.layout is None:
        print(f"{len(report.missing)} cell(s) of the table have no result (shown as –/--).", file=sys.stderr)
    elif report.missing:
        print(f"{len(report.missing)} cell(s) of layout {layout.name} have no result:", file=sys.stderr)
        for cell in report.missing:
            print(f"  {cell}", file=sys.stderr)
    left_out = left_out_message(frame, layout) if args.layout is not None else None
    if left_out:
        print(left_out, file=sys.stderr)
    _print_stale(stale_note(zip(frame["run_dir"], frame["stale"])))
    return 0


def _print_stale(note: str | None) -> None:
    if note:
        print(note, file=sys.stderr)


def add_where_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                        help="keep the results whose KEY (dataset, backbone, method, J, variant, seed, grid, "
                             "run_id) is VALUE; VALUE may be a comma list; repeat for several keys")


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``export`` subcommand's arguments to ``parser``."""
    parser.add_argument("runs_dirs", nargs="+", type=Path, metavar="RUNS_DIR",
                        help="folders searched recursively for result.json")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE",
                        help="FILE.csv, FILE.jsonl or FILE.parquet (needs pyarrow: the 'parquet' extra)")


def run_export(args: argparse.Namespace) -> int:
    """One flat row per run (spec, metrics, diagnostics, timings, provenance) to a CSV/JSONL/Parquet file."""
    from reports.export import check_export_path, export_records, write_export
    from reports.load import stale_note

    check_export_path(args.out)
    records = export_records(args.runs_dirs)
    write_export(records, args.out)
    print(f"wrote {len(records)} run(s) to {args.out}")
    _print_stale(stale_note((str(r["run_dir"]), r["stale"]) for r in records))
    return 0


def add_plot_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``plot`` subcommand's arguments to ``parser``."""
    parser.add_argument("inputs", nargs="+", type=Path, metavar="RUNS_DIR|CSV|RUN_DIR",
                        help="folders searched recursively for result.json (or tidy CSVs); with --curves, "
                             "run directories (or folders holding them) with a metrics.jsonl")
    parser.add_argument("--curves", action="store_true",
                        help="training curves from each run's metrics.jsonl: one panel per loss term, one line per run")
    parser.add_argument("--x", metavar="DIM", help=f"x axis: one of {DIMENSIONS}, seed (default: J)")
    parser.add_argument("--y", type=_names, metavar="NAME",
                        help="the metric to plot (default: acc); with --curves, the quantities, comma-separated: "
                             "loss terms, lr.GROUP, seconds (default: every loss term)")
    parser.add_argument("--hue", metavar="DIM", help="one line per value of this dimension, e.g. method")
    parser.add_argument("--facet", metavar="DIM", help="one panel per value of this dimension, e.g. backbone")
    add_where_argument(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="FILE.png, FILE.pdf or FILE.svg")


def run_plot(args: argparse.Namespace) -> int:
    """Draw a metric against a dimension (mean ± seed spread) or, with --curves, training curves."""
    if args.curves:
        from reports.curves import plot_curves

        given = (("--x", args.x), ("--hue", args.hue), ("--facet", args.facet), ("--where", args.where))
        extra = [option for option, value in given if value]
        if extra:
            raise ProtobenchError(f"{', '.join(extra)} do not apply to --curves; drop them.")
        curves = plot_curves(args.inputs, args.out, quantities=args.y)
        print(f"wrote curves of {len(curves)} run(s) to {args.out}")
        return 0
    from reports.load import load_runs, stale_note
    from reports.pivot import parse_where
    from reports.plots import check_figure_path, plot_results

    if args.y is not None and len(args.y) > 1:
        raise ProtobenchError(f"--y takes one metric, got {', '.join(args.y)}; make one plot per metric.")
    check_figure_path(args.out)
    frame = load_runs(args.inputs, parse_where(args.where))
    series = plot_results(frame, args.out, x=args.x or "J", y=(args.y or ["acc"])[0], hue=args.hue, facet=args.facet)
    points = sum(len(s.points) for s in series)
    print(f"wrote {points} point(s) in {len(series)} series to {args.out}")
    for s in series:  # every point's n (the figure's error bars are the spread of these seeds)
        print(f"  {s.label}: " + ", ".join(f"{x}={p.x} n={p.n}" for p in s.points for x in [args.x or "J"]))
    _print_stale(stale_note(zip(frame["run_dir"], frame["stale"])))
    return 0
