"""``check-code``: whether a method's numbers changed since its code was last probed (docs/design/run-identity.md)."""
from __future__ import annotations

import argparse

from benchmark.errors import ProtobenchError


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``check-code`` to ``sub``."""
    p = sub.add_parser("check-code", help="run a method's behaviour probe and record in its probe lock whether its "
                                          "numbers changed (results of refactored code then read current)")
    p.add_argument("methods", nargs="*", metavar="METHOD", help="registry keys or import paths (package.module:Class)")
    p.add_argument("--all", action="store_true", help="every method of the suite")
    p.add_argument("--boundary", action="store_true",
                   help="also list the statements the probe cannot judge (they keep the byte rule)")
    p.add_argument("--measure", action="store_true",
                   help="measure instead what the tolerance absorbs and what it catches (another CPU's kernels, a "
                        "reassociated sum, a hyperparameter moved by 1e-6); writes nothing")
    p.set_defaults(func=cmd_check_code)


def cmd_check_code(args: argparse.Namespace) -> int:
    from methods.registry import BUILTIN_METHODS

    if bool(args.methods) == bool(args.all):
        raise ProtobenchError("check-code needs method names or --all (not both), e.g. `protobench check-code protopnet`")
    methods = list(BUILTIN_METHODS) if args.all else list(dict.fromkeys(args.methods))
    from benchmark.method_lookup import declaration

    for method in methods:  # an unknown name is refused before any probe runs
        declaration(method)
    if args.measure:
        from benchmark.behaviour.tolerance import measure

        for method in methods:
            print(measure(method).line(), flush=True)
        return 0
    from benchmark.behaviour.check import check_code

    verdicts = check_code(methods, log=lambda line: print(line, flush=True))
    if args.boundary:
        for verdict in verdicts:
            print(f"{verdict.method}: {len(verdict.blind)} statements the probe cannot judge (byte rule):")
            for statement in verdict.blind:
                print(f"  {statement.describe()}")
    return 1 if any(v.error is not None for v in verdicts) else 0
