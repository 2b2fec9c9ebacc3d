"""The commands that read finished runs into tables and rows: ``report``, ``export``, ``compare``,
``agreement`` (the logic is ``reports/``'s; the figures' commands: benchmark/cli/figures.py).

    protobench report RUNS_DIR|CSV... [--layout NAME] [--format latex|markdown|csv] [--against CSV]
                      [--rows DIMS] [--cols DIMS] [--metrics NAMES] [--where KEY=VALUE]...
                      [--decimals N] [--method-macro] [--ci [LEVEL]] [--significance [ALPHA]] [--out FILE]
    protobench report --list
    protobench export RUNS_DIR... --out FILE.csv|.jsonl|.parquet [--per-image]
    protobench export RUNS_DIR... --format eee --out DIR [--layout flat|submission] [--developer NAME]
                      [--collection NAME] [--organization NAME]
    protobench compare RUNS_DIR... --by KEY [--baseline VALUE] [--metrics NAMES] [--level P] [--format markdown|csv]
    protobench agreement RUNS_DIR... [--level P] [--resamples N] [--seed N] [--format markdown|csv] [--out FILE]

Building these parsers imports no pandas (every ``protobench`` command
builds them); the command bodies import what they use.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.cli.common import add_check_adapters_argument, adapter_imports, emit
from benchmark.errors import ProtobenchError
from reports.layouts import get_layout, list_layouts

#: the keys of ``reports.render.WRITERS``, spelt here so that building the CLI parser does not
#: import pandas (every ``protobench`` command builds it; only ``report`` renders)
FORMATS: tuple[str, ...] = ("latex", "markdown", "csv")
DIMENSIONS = "dataset, backbone, method, J, variant"


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``report``, ``export``, ``compare`` and ``agreement`` to ``sub``."""
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

    p = sub.add_parser("agreement", help="whether the metrics agree: Kendall's τ between the method rankings of each "
                                         "pair of metrics (bootstrap intervals over test images), reliability over "
                                         "seeds (ICC), rank stability across J and backbones, the supported orderings")
    add_agreement_arguments(p)
    p.set_defaults(func=run_agreement)



def name_list(value: str) -> list[str]:
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
    parser.add_argument("--rows", type=name_list, metavar="DIMS",
                        help=f"without --layout: row dimensions, comma-separated, of {DIMENSIONS} "
                             "(default: method,J,variant, those that vary)")
    parser.add_argument("--cols", type=name_list, metavar="DIMS",
                        help="without --layout: column dimensions (default: dataset,backbone, those that vary); "
                             "metrics are the innermost columns")
    parser.add_argument("--metrics", type=name_list, metavar="NAMES",
                        help="without --layout: metrics to show, of con, sta, dis, comp, acc, epoch_seconds, epoch_seconds_live_trunk, "
                             "inference_images_per_second (default: those of con…acc that any result has)")
    add_where_argument(parser)
    parser.add_argument("--method-macro", action="store_true",
                        help="LaTeX: write vMFProto as the paper's \\method{} macro")
    parser.add_argument("--against", type=Path, metavar="CSV",
                        help="published numbers to show next to ours, e.g. reports/paper/cub_main.csv")
    parser.add_argument("--decimals", type=int, default=1, help="digits after the point (default: 1)")
    parser.add_argument("--ci", type=float, nargs="?", const=95.0, metavar="LEVEL",
                        help="every cell with its confidence interval over seeds (accuracy also over seeds × test images), "
                             "at LEVEL percent (default 95); docs/guides/statistics.md")
    parser.add_argument("--significance", type=float, nargs="?", const=0.05, metavar="ALPHA",
                        help="bold the best cell only where a paired test finds it better than the runner-up, and "
                             "mark cells tied with the best (≈), at ALPHA (default 0.05); docs/guides/statistics.md")
    parser.add_argument("--reference", metavar="METHOD",
                        help="add each method's gap to this method's row (linear_probe, knn) on the same dataset and "
                             "trunk for every metric, with the paired interval (seeds × images where per-image "
                             "records exist; --ci sets the level, default 95); with --format csv the gaps alone")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the table here instead of stdout")
    parser.add_argument("--list", dest="list_layouts", action="store_true", help="list the layouts and exit")
    add_check_adapters_argument(parser)
    parser.add_argument("--tuning", action="store_true",
                        help="per tuning cell: trials, default and best validation score, the chosen hyperparameters, "
                             "and test accuracy default vs tuned with paired CI and p (docs/guides/tuning.md)")


def run_report(args: argparse.Namespace) -> int:
    """Render one table (or list layouts). Missing cells are listed on stderr; returns 0, or 1 when
    --layout names a table no result fills."""
    from benchmark.run.identity import mark_stale
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
    if args.ci is not None and not 0 < args.ci < 100:  # every use of --ci, --reference's gaps included
        raise ProtobenchError(f"--ci {args.ci:g} must lie strictly between 0 and 100 (a confidence level in percent)")
    layout = get_layout(args.layout) if args.layout is not None else None
    where = parse_where(args.where)
    frame = mark_stale(load_runs(args.runs_dirs, where, required=not args.tuning), adapter_imports(args))
    if args.tuning:
        from reports.tuning import read_summaries, render_tuning

        text = render_tuning(frame, read_summaries([Path(p) for p in args.runs_dirs]), (args.ci or 95.0) / 100)
        emit(text, args.out)
        return 0
    if layout is None:
        layout = pivot_layout(frame, rows=args.rows, cols=args.cols, metrics=args.metrics)
    against = load_csv(args.against) if args.against is not None else None
    gaps = None
    if args.reference is not None:  # checked, and computed, before anything is written
        from reports.reference import reference_gaps, render_gaps

        if args.fmt == "latex":
            raise ProtobenchError("--reference writes its gaps as markdown (after the table) or CSV (the gaps "
                                  "alone); pass --format markdown or --format csv.")
        gap_level = (args.ci or 95.0) / 100
        gaps = render_gaps(reference_gaps(frame, args.reference, gap_level), args.reference, args.fmt, gap_level,
                           args.decimals)
    report = render_report(
        frame, layout, args.fmt, against=against, decimals=args.decimals, method_macro=args.method_macro,
        level=None if args.ci is None else args.ci / 100, significance=args.significance,
    )
    if gaps is not None:  # CSV: the gaps alone (one table per file); markdown: after the table
        emit(gaps if args.fmt == "csv" else report.text.rstrip("\n") + "\n\n" + gaps, args.out)
    else:
        emit(report.text, args.out)
    if report.interval_note and args.fmt == "csv":
        print(report.interval_note, file=sys.stderr)
    if report.missing and args.layout is None:
        print(f"{len(report.missing)} cell(s) of the table have no result (shown as –/--).", file=sys.stderr)
    elif args.layout is not None:
        _print_layout_coverage(frame, layout, report.missing)
    print_stale(stale_note(zip(frame["run_dir"], frame["stale"]), frame.attrs.get("code_notes")))
    if args.layout is not None and args.against is None and len(report.missing) >= _cell_count(layout):
        print(f"protobench: no result fills any cell of layout {layout.name} (the lines above name the keys that "
              f"matched nothing); pick the layout of these runs (`report --list`) or drop --layout", file=sys.stderr)
        return 1
    return 0


def _cell_count(layout) -> int:  # (Layout)
    """How many value cells a layout has: its rows × its metric columns."""
    from reports.layout import Row

    return sum(isinstance(item, Row) for item in layout.body) * sum(len(g.metrics) for g in layout.columns)


#: a layout's empty cells are listed one by one up to this many (else only counted per reason)
LISTED_MISSING_CELLS = 8


def _print_layout_coverage(frame, layout, missing: list[str]) -> None:  # (pd.DataFrame, Layout, …)
    """On stderr: the results the layout leaves out with the suggestion (first: it is what to act
    on), then its empty cells counted per reason, one line each, listed when few."""
    from reports.coverage import left_out_message, missing_reasons

    left_out = left_out_message(frame, layout)
    if left_out:
        print(left_out, file=sys.stderr)
    if not missing:
        return
    print(f"{len(missing)} cell(s) of layout {layout.name} have no result:", file=sys.stderr)
    for reason, count in missing_reasons(frame, layout).most_common():
        print(f"  {count}× {reason}", file=sys.stderr)
    if len(missing) <= LISTED_MISSING_CELLS:
        for cell in missing:
            print(f"    {cell}", file=sys.stderr)


def print_stale(note: str | None) -> None:
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
                        help="FILE.csv, FILE.jsonl or FILE.parquet (needs pyarrow: the 'parquet' extra); with "
                             "--format eee a new folder")
    parser.add_argument("--per-image", action="store_true",
                        help="one row per run × test image: label, prediction, correctness, logit margin and each "
                             "metric's per-image part")
    parser.add_argument("--format", choices=("table", "eee"), default="table", dest="export_format",
                        help="table (default): one file, its type from the --out suffix; eee: Every Eval Ever "
                             "records (schema 0.3.0), one per run, laid out by --layout")
    parser.add_argument("--layout", choices=("flat", "submission"), default="flat", dest="eee_layout",
                        help="with --format eee: flat (default) DIR/<run_id>.json; submission: the datastore's "
                             "DIR/data/<collection>/<developer>/<model>/<uuid>.json with <uuid>_samples.jsonl "
                             "(one line per test image) beside it")
    parser.add_argument("--developer", metavar="NAME",
                        help="with --format eee: the lab whose heads these are, the model ids' prefix and the "
                             "submission's developer folder (needed by --layout submission)")
    parser.add_argument("--collection", metavar="NAME",
                        help="with --layout submission: the datastore collection folder (default: "
                             "protobench-<dataset> of each run)")
    parser.add_argument("--organization", metavar="NAME",
                        help="with --format eee: the lab that ran the evaluations (source_organization_name; "
                             "default: --developer, else unknown)")
    add_check_adapters_argument(parser)


def run_export(args: argparse.Namespace) -> int:
    """One flat row per run (spec, metrics, diagnostics, timings, provenance) to a CSV/JSONL/Parquet file."""
    from benchmark.run.identity import mark_stale, result_judge
    from reports.export import check_export_path, export_records, per_image_records, write_export
    from reports.load import load_runs, stale_note

    if args.export_format == "eee":
        return _export_eee(args)
    given = [f"--{name}" for name in ("developer", "collection", "organization") if getattr(args, name) is not None]
    if given or args.eee_layout != "flat":
        raise ProtobenchError(f"{', '.join(given or ['--layout'])} shape Every Eval Ever records: add --format eee, "
                              "or drop them")
    check_export_path(args.out)
    notes = None
    if args.per_image:  # each run's rows carry its verdict, as the per-run export's
        records = per_image_records(args.runs_dirs, result_judge(adapter_imports(args)))
    else:
        frame = mark_stale(load_runs(args.runs_dirs, csv=False), adapter_imports(args))
        records, notes = export_records(frame), frame.attrs.get("code_notes")
    write_export(records, args.out)
    runs = {str(r["run_dir"]): r["stale"] for r in records}
    print(f"wrote {len(records)} row(s) of {len(runs)} run(s) to {args.out}" if args.per_image
          else f"wrote {len(records)} run(s) to {args.out}")
    print_stale(stale_note(runs.items(), notes))
    return 0


def _export_eee(args: argparse.Namespace) -> int:
    """One Every Eval Ever record per run into the new folder ``--out`` (reports/eee.py)."""
    from benchmark.run.identity import mark_stale
    from reports.eee import SCHEMA_VERSION
    from reports.eee_export import EeeOptions, eee_files
    from reports.eee_paths import SAMPLES_SUFFIX, check_eee_out, write_eee
    from reports.load import load_runs, stale_note

    if args.per_image:
        raise ProtobenchError("--per-image and --format eee do not combine: each Every Eval Ever record already "
                              "names its run's per-image file; drop one of them")
    options = EeeOptions(args.eee_layout, args.developer, args.collection, args.organization).checked()
    check_eee_out(args.out)
    frame = mark_stale(load_runs(args.runs_dirs, csv=False), adapter_imports(args))  # the readers' checks
    written = write_eee(eee_files(args.runs_dirs, options), args.out)
    samples = sum(name.endswith(SAMPLES_SUFFIX) for name in written)
    print(f"wrote {len(written) - samples} Every Eval Ever record(s) and {samples} samples file(s) to {args.out} "
          f"(schema {SCHEMA_VERSION}, layout {options.layout})")
    print_stale(stale_note(zip(frame["run_dir"], frame["stale"]), frame.attrs.get("code_notes")))
    return 0


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``compare`` subcommand's arguments to ``parser``."""
    parser.add_argument("runs_dirs", nargs="+", type=Path, metavar="RUNS_DIR",
                        help="folders searched recursively for result.json")
    parser.add_argument("--by", required=True, metavar="KEY", help=f"the key whose values are compared: one of {DIMENSIONS}")
    parser.add_argument("--baseline", metavar="VALUE", help="compare every other value with this one (default: every pair)")
    parser.add_argument("--metrics", type=name_list, metavar="NAMES", help="of acc, con, sta, dis, comp (default: those present)")
    add_where_argument(parser)
    parser.add_argument("--level", type=float, default=95.0, metavar="P", help="confidence level in percent (default 95)")
    parser.add_argument("--format", dest="fmt", choices=("markdown", "csv"), default="markdown",
                        help="a readable table with its note, or CSV (default: markdown)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write here instead of stdout")


def check_level(level: float) -> None:
    """A confidence ``--level`` in percent, strictly inside (0, 100)."""
    if not 0 < level < 100:
        raise ProtobenchError(f"--level must lie strictly between 0 and 100 (percent), got {level:g}.")


def run_compare(args: argparse.Namespace) -> int:
    """Paired comparisons of the values of one key, cell by cell (docs/guides/statistics.md)."""
    from reports.load import load_runs
    from reports.paired import compare_levels, render_comparisons
    from reports.pivot import parse_where

    check_level(args.level)
    frame = load_runs(args.runs_dirs, parse_where(args.where))
    baseline = args.baseline
    if args.by == "method":  # the tables' names ("ProtoPool-lite", not its import path); --baseline takes either
        from reports.pivot import method_labels

        shown = method_labels(frame)  # one label a method, also where display names collide
        baseline = shown.get(baseline, baseline) if baseline is not None else None
        frame = frame.assign(method=frame["method"].map(lambda m: shown.get(m, m)))
    comparisons = compare_levels(frame, args.by, baseline=baseline, metrics=args.metrics, level=args.level / 100)
    text = render_comparisons(comparisons, args.fmt, args.level / 100)
    emit(text, args.out)
    return 0


def add_agreement_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``agreement`` subcommand's arguments to ``parser``."""
    parser.add_argument("runs_dirs", nargs="+", type=Path, metavar="RUNS_DIR",
                        help="folders searched recursively for result.json (three or more methods, two or more metrics)")
    add_where_argument(parser)
    parser.add_argument("--level", type=float, default=95.0, metavar="P",
                        help="confidence level of the τ intervals and the tests, in percent (default 95)")
    parser.add_argument("--resamples", type=int, default=2000, metavar="N",
                        help="bootstrap resamples of the test images per τ interval (default 2000)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="the bootstrap's random seed (default 0)")
    parser.add_argument("--rank-reference", action="store_true",
                        help="rank the reference rows (linear probe, k-NN) with the methods; by default they are "
                             "left out of every ranking, and the report says so")
    parser.add_argument("--format", dest="fmt", choices=("markdown", "csv"), default="markdown",
                        help="the whole report as markdown, or the τ table as CSV (default: markdown)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write here instead of stdout")


def run_agreement(args: argparse.Namespace) -> int:
    """Whether the metrics agree on the order of the methods (docs/guides/agreement.md)."""
    from reports.agreement import Bootstrap
    from reports.agreement_report import build_agreement, render_agreement
    from reports.load import load_runs
    from reports.pivot import parse_where

    check_level(args.level)
    if args.resamples < 100:
        raise ProtobenchError(f"--resamples {args.resamples}: a percentile interval needs at least 100 resamples "
                              "(default 2000).")
    frame = load_runs(args.runs_dirs, parse_where(args.where), csv=False)
    report = build_agreement(frame, Bootstrap(n_resamples=args.resamples, seed=args.seed, level=args.level / 100),
                             rank_reference=args.rank_reference)
    emit(render_agreement(report, args.fmt), args.out)
    return 0
