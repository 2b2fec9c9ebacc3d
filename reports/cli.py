"""``protobench report``: arguments and the command body, for the CLI to mount as a subcommand.

    protobench report RUNS_DIR|CSV... --layout NAME [--format latex|markdown] [--against CSV]
                      [--decimals N] [--out FILE]
    protobench report --list
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.errors import ProtobenchError
from reports.layouts import get_layout, list_layouts

#: the keys of ``reports.render.WRITERS``, spelt here so that building the CLI parser does not
#: import pandas (every ``protobench`` command builds it; only ``report`` renders)
FORMATS: tuple[str, ...] = ("latex", "markdown")


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``."""
    parser.add_argument("runs_dirs", nargs="*", type=Path, metavar="RUNS_DIR|CSV",
                        help="folders searched recursively for result.json, or tidy CSV files "
                             "(e.g. reports/paper/cub_main.csv to regenerate the paper's table)")
    parser.add_argument("--layout", metavar="NAME", help="table to render (see --list)")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="markdown",
                        help="output format (default: markdown)")
    parser.add_argument("--against", type=Path, metavar="CSV",
                        help="published numbers to show next to ours, e.g. reports/paper/cub_main.csv")
    parser.add_argument("--decimals", type=int, default=1, help="digits after the point (default: 1)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the table here instead of stdout")
    parser.add_argument("--list", dest="list_layouts", action="store_true", help="list the layouts and exit")


def run_report(args: argparse.Namespace) -> int:
    """Render one table (or list layouts). Missing cells are listed on stderr; returns 0."""
    import pandas as pd

    from reports.load import load_csv, load_results
    from reports.render import render_report

    if args.list_layouts:
        layouts = list_layouts()
        width = max(len(name) for name, _ in layouts)
        for name, description in layouts:
            print(f"{name:<{width}}  {description}")
        return 0
    if args.layout is None:
        raise ProtobenchError(
            "Choose a table with --layout NAME; `protobench report --list` shows the names."
        )
    layout = get_layout(args.layout)
    if not args.runs_dirs:
        raise ProtobenchError("Give at least one RUNS_DIR holding finished runs (for example runs/).")
    csvs = [p for p in args.runs_dirs if p.suffix == ".csv" and p.is_file()]
    dirs = [p for p in args.runs_dirs if p not in csvs]
    frames = [load_csv(p) for p in csvs] + ([load_results(dirs)] if dirs else [])
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    against = load_csv(args.against) if args.against is not None else None
    report = render_report(frame, layout, args.fmt, against=against, decimals=args.decimals)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report.text, encoding="utf-8")
    else:
        sys.stdout.write(report.text)
    if report.missing:
        print(f"{len(report.missing)} cell(s) of layout {layout.name} have no result:", file=sys.stderr)
        for cell in report.missing:
            print(f"  {cell}", file=sys.stderr)
    return 0
