"""protobench: train and evaluate part-prototype classifiers on frozen DINO trunks, grid by grid (make demo; see the README and docs/)."""
from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from benchmark.cli import code, data, figures, planning, results, runs, sharing, tuning
from benchmark.cli.common import Parser
from benchmark.errors import ProtobenchError

# The CLI face: one module per command group, each with ``add_commands(sub)``; the printing of
# every command lives here too. Every command builds the whole parser, so the group modules import
# at module level only what loads without torch and pandas; a command body imports the training,
# method and report code it uses (`report`, `status`, `list` and `--help` stay light).
GROUPS = (runs, planning, results, figures, data, sharing, tuning, code)


def _version() -> str:
    try:
        return version("protobench")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="protobench", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_commands(sub)
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
