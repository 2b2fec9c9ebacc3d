"""What every command group of the CLI shares: the parser class (defaults in ``--help``), the
options of grid-reading commands, the grid overrides they make, and where runs and token caches go."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.errors import ProtobenchError, did_you_mean, nearest_sibling
from benchmark.grid import OptionValue, parse_set_options, parse_sweep_options
from benchmark.output_file import write_output
from benchmark.run.own_code import EVERY_ADAPTER, NO_IMPORTS, AdapterImports
from benchmark.run.store import default_cache_root

if TYPE_CHECKING:
    from benchmark.config import RunSpec


def demo_grid() -> Path:
    """The demo grid shipped with the suite (``protobench demo``, and ``perf`` without a grid)."""
    return Path(str(resources.files("benchmark") / "grids" / "demo.toml"))


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default unless it is unset (None, False, []) or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """The parser of protobench and of each command: defaults shown in ``--help``, options matched
    whole (``allow_abbrev=False``: ``--onl`` is not taken for ``--only``), and an unrecognised
    option refused with its command's usage and the closest option it has."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command_parser(parsed)
            command.error(unrecognised_message(extras, command))
        return parsed

    def _command_parser(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The parser of the subcommand ``parsed`` names (its usage is the one to show), else this one."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if chosen is not None:
                    return chosen._command_parser(parsed) if isinstance(chosen, Parser) else chosen
        return self

    def _check_value(self, action: argparse.Action, value: object) -> None:
        """argparse's own check of a choice (a subcommand, --executor, …) with the suite's
        did-you-mean (benchmark.errors.did_you_mean)."""
        if action.choices is not None and value not in action.choices:
            names = [str(c) for c in action.choices]
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{did_you_mean(str(value), names)} "
                                                 f"(choose from {', '.join(names)})")
        super()._check_value(action, value)


def unrecognised_message(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized arguments: …`` with the closest option of ``parser`` to each unknown option
    (benchmark.errors.did_you_mean; ``--jsn`` → ``--json``, ``--onl`` → ``--only``)."""
    options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    hints = []
    for word in extras:
        if word.startswith("-"):
            name = word.partition("=")[0]
            hint = did_you_mean(name, options)
            hints.append(f"{name}: not an option of {parser.prog}{hint}" if hint else
                         f"{name}: not an option of {parser.prog} (see {parser.prog} --help)")
    return f"unrecognized arguments: {' '.join(extras)}" + ("; " + "; ".join(hints) if hints else "")


def emit(text: str, out: str | Path | None) -> None:
    """A command's text output: to ``out`` whole or not at all (``write_output``), else to stdout."""
    if out is None:
        sys.stdout.write(text)
    else:
        write_output(out, text.encode("utf-8"))


def grid_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The grid fields the command line overrides: ``--set``, ``--sweep`` and the options of
    :func:`add_grid_options` and :func:`add_run_options` (a given data root is checked to exist when
    the grid is read: benchmark.grid.parse_grid)."""
    overrides: dict[str, object] = parse_set_options(getattr(args, "set", None) or [])
    overrides.update(parse_sweep_options(getattr(args, "sweep", None) or []))
    if getattr(args, "data_root", None):
        overrides["data_root"] = OptionValue(args.data_root)
    if getattr(args, "weights", None):
        overrides["weights"] = OptionValue(args.weights)
    if getattr(args, "device", None):
        overrides["device"] = OptionValue(args.device)
    if getattr(args, "no_cache", False):
        overrides["cache"] = False
    return overrides


def tensorboard_dir(args: argparse.Namespace) -> Path | None:
    """``--tensorboard DIR``, checked to be usable before any run starts."""
    if not getattr(args, "tensorboard", None):
        return None
    from benchmark.run.epochlog import summary_writer_class

    summary_writer_class()
    return Path(args.tensorboard)


def runs_root_of(args: argparse.Namespace, grid_runs_dir: str) -> Path:
    """Where run directories go: ``--runs-dir``, else the grid's ``runs_dir``."""
    return Path(args.runs_dir or grid_runs_dir)


def cache_root_of(args: argparse.Namespace, runs_root: Path) -> Path:
    """Where the token cache is: ``--cache-dir``, else ``RUNS_DIR/.token-cache``."""
    return Path(args.cache_dir) if args.cache_dir else default_cache_root(runs_root)


def existing_runs_dir(path: str) -> Path:
    """A runs directory a command reads, which must exist (ProtobenchError naming the fix)."""
    root = Path(path)
    if not root.exists():
        raise ProtobenchError(f"runs directory {str(root)!r} does not exist{nearest_sibling(root)}; give the directory `protobench run` wrote to")
    return root


def check_cache_fits(runs: list[RunSpec], cache_root: Path) -> None:
    """The token-cache entries the runs still need must fit in ``cache_root`` (ProtobenchError)."""
    from benchmark.cache.space import check_cache_space
    from benchmark.estimates.caches import grid_cache_needs

    check_cache_space([need for need, _ in grid_cache_needs(runs)], cache_root)


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


def add_check_adapters_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check-adapters", action="store_true",
                        help="import the own adapters (package.module:Class) the results name, to check whether "
                             "their code changed; without it reading results never imports code a result names "
                             "and their results read 'unverifiable' (set PYTHONPATH as when they ran)")


def adapter_imports(args: argparse.Namespace) -> AdapterImports:
    """What a reading command may import: every own adapter with --check-adapters, else none."""
    return EVERY_ADAPTER if getattr(args, "check_adapters", False) else NO_IMPORTS
