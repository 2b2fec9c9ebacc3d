"""The commands that share results: ``bundle`` (runs as a checked, shareable folder and archive,
optionally with their trained heads) and ``site`` (a static results site).

    protobench bundle RUNS_DIR... --out DIR [--checkpoints] [--license ID] [--push REPO_ID]
        [--hub-benchmark REPO_ID]
    protobench bundle verify DIR
    protobench bundle pull ORG/NAME --out DIR [--revision REV]
    protobench leaderboard SOURCE... --out DIR [--allow-unverified] [--level L] [--alpha A]
        [--unpack-budget-mib N]
    protobench site RUNS_DIR... --out DIR [--where KEY=VALUE]... [--compare KEY]... [--reference METHOD]

Building these parsers imports neither torch nor pandas; the command bodies import what they use.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmark.cli.common import add_check_adapters_argument, adapter_imports
from benchmark.errors import ProtobenchError


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``bundle`` and ``site`` to ``sub``."""
    p = sub.add_parser("bundle", help="finished runs as a shareable folder + .tar.gz with a SHA-256 manifest and a "
                                      "model card (--checkpoints: trained heads as safetensors); `bundle verify DIR` "
                                      "checks one; `bundle pull ORG/NAME --out DIR` fetches one from the Hub")
    p.add_argument("runs_dirs", nargs="+", metavar="RUNS_DIR",
                   help="folders holding finished runs; or `verify DIR` to check a bundle; or `pull ORG/NAME` to "
                        "fetch a bundle from the Hugging Face Hub into --out (verified before it is kept)")
    p.add_argument("--revision", metavar="REV", help="with pull: the Hub revision (branch, tag or commit)")
    p.add_argument("--out", type=Path, metavar="DIR", help="the bundle folder to write (DIR.tar.gz beside it)")
    p.add_argument("--checkpoints", action="store_true",
                   help="add each run's trained head as head.safetensors (the frozen trunk is referenced, not copied)")
    p.add_argument("--license", default="unknown", metavar="ID",
                   help="the model card's license field, a Hugging Face license id (default: unknown)")
    p.add_argument("--push", metavar="REPO_ID", help="then upload the folder to this Hugging Face model repository "
                                                     "(the eval-results files name it as each result's source)")
    p.add_argument("--hub-benchmark", metavar="REPO_ID",
                   help="the Hugging Face benchmark dataset the .eval_results/*.yaml files report to "
                        "(default: protobench/protobench)")
    p.set_defaults(func=cmd_bundle)

    p = sub.add_parser("site", help="a self-contained static results site (overview, plots, one page per run, "
                                    "comparisons) that opens from file://")
    p.add_argument("runs_dirs", nargs="+", type=Path, metavar="RUNS_DIR",
                   help="folders searched recursively for result.json (runs directories or bundles)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the site folder (index.html inside)")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="keep the results whose KEY is VALUE (as for report)")
    p.add_argument("--compare", action="append", metavar="KEY",
                   help="a comparison page of this key's values, as `protobench compare --by KEY` (repeatable; "
                        "default: method and J, those with two or more values)")
    p.add_argument("--reference", metavar="METHOD",
                   help="a page of each method's gap to this method's row (linear_probe, knn), as "
                        "`protobench report --reference METHOD`")
    p.add_argument("--leaderboard", type=Path, metavar="DIR",
                   help="a leaderboard folder (`protobench leaderboard --out DIR`): the site gets its page, "
                        "leaderboard.html, linked from the overview")
    add_check_adapters_argument(p)
    p.set_defaults(func=cmd_site)

    p = sub.add_parser("leaderboard", help="results from many labs' bundles, verified, re-scored from their records, "
                                           "ranked with statistical ties: JSON (+ schema), CSV, markdown, LaTeX, an "
                                           "offline page and the Hub's eval.yaml")
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="a bundle folder, a bundle archive (.tar.gz), a runs folder, or hf:ORG/NAME[@REVISION]")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the leaderboard folder to write")
    p.add_argument("--allow-unverified", action="store_true",
                   help="list a bundle that fails its SHA256SUMS check, its rows marked unverified (default: refuse it)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level of the ties with the best (Holm-adjusted; default 0.05)")
    p.add_argument("--unpack-budget-mib", type=int, metavar="N",
                   help="MiB one bundle archive may unpack to (default: 100 × the archive's size, at least 256 MiB); "
                        "an archive that declares more is refused before anything is written")
    p.set_defaults(func=cmd_leaderboard)


def cmd_bundle(args: argparse.Namespace) -> int:
    if args.runs_dirs[0] == "verify":
        return _verify(args)
    if args.runs_dirs[0] == "pull":
        return _pull(args)
    from benchmark.bundle.make import make_bundle, push_bundle

    if args.out is None:
        raise ProtobenchError("bundle needs --out DIR (the folder to write; DIR.tar.gz goes beside it)")
    bundled = make_bundle([Path(d) for d in args.runs_dirs], args.out, checkpoints=args.checkpoints,
                          license=args.license, hub_benchmark=args.hub_benchmark, repo_id=args.push)
    print(f"bundled {bundled.runs} run(s), {bundled.files} file(s), to {bundled.folder} and {bundled.archive}")
    if args.push:
        print(f"pushed to {push_bundle(bundled.folder, args.push)}")
    return 0


def _pull(args: argparse.Namespace) -> int:
    from benchmark.bundle.pull import pull_bundle

    if len(args.runs_dirs) != 2 or args.out is None or args.checkpoints or args.push:
        raise ProtobenchError("usage: protobench bundle pull ORG/NAME --out DIR [--revision REV]")
    folder, commit, checked = pull_bundle(args.runs_dirs[1], args.out, revision=args.revision)
    print(f"pulled hf:{args.runs_dirs[1]}@{commit} to {folder}: all {checked} file(s) match SHA256SUMS")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from benchmark.bundle.manifest import verify_bundle

    given = [o for o, v in (("--out", args.out), ("--checkpoints", args.checkpoints), ("--push", args.push)) if v]
    if len(args.runs_dirs) != 2 or given:
        raise ProtobenchError("usage: protobench bundle verify DIR (one bundle folder, no other option)")
    root = Path(args.runs_dirs[1])
    found = verify_bundle(root)
    for what, names in (("a symbolic link (a bundle holds none)", found.links),
                        ("changed (hash differs)", found.changed), ("missing", found.missing),
                        ("not in the manifest", found.unlisted)):
        for name in names:
            print(f"{root / name}: {what}", file=sys.stderr)
    if found.local:
        print(f"{len(found.local)} file(s) written here by commands that read the bundle (evaluations/, "
              ".token-cache/) are not part of it")
    if not found.ok:
        print(f"bundle {root} FAILED verification: {len(found.links)} link(s), {len(found.changed)} changed, "
              f"{len(found.missing)} missing, {len(found.unlisted)} unlisted file(s); do not trust it, ask for it "
              "again", file=sys.stderr)
        return 1
    print(f"bundle {root}: all {found.checked} file(s) match SHA256SUMS")
    return 0


def cmd_site(args: argparse.Namespace) -> int:
    from benchmark.run.identity import mark_stale
    from reports.load import load_runs
    from reports.pivot import parse_where
    from reports.site.build import build_site

    started = time.perf_counter()
    frame = mark_stale(load_runs(args.runs_dirs, parse_where(args.where), csv=False), adapter_imports(args))
    built = build_site(frame, args.out, compare_keys=args.compare, inputs=args.runs_dirs, reference=args.reference,
                       leaderboard=args.leaderboard)
    print(f"wrote {built.pages} page(s), {built.bytes / 2**20:.1f} MiB, to {args.out} in "
          f"{time.perf_counter() - started:.1f} s; open {args.out / 'index.html'}")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    import tempfile

    from benchmark.bundle.sources import HUB_PREFIX, open_sources
    from reports.leaderboard.build import build_leaderboard, check_target

    started = time.perf_counter()
    if args.unpack_budget_mib is not None and args.unpack_budget_mib < 1:
        raise ProtobenchError(f"--unpack-budget-mib {args.unpack_budget_mib} must be ≥ 1 (MiB an archive may unpack to)")
    budget = None if args.unpack_budget_mib is None else args.unpack_budget_mib << 20
    local = [Path(s) for s in args.sources if not s.startswith(HUB_PREFIX)]
    check_target(args.out, local)  # before any source is read or unpacked
    with tempfile.TemporaryDirectory(prefix="protobench-leaderboard-") as work:
        sources = open_sources(args.sources, Path(work), allow_unverified=args.allow_unverified, unpack_budget=budget)
        built, sources = build_leaderboard(sources, args.out, level=args.level, alpha=args.alpha,
                                           allow_unverified=args.allow_unverified)
    for source in sources:
        if not source.verified:
            print(f"note: source {source.name} is not verified ({source.verification}); its rows say so",
                  file=sys.stderr)
        for run, why in source.unreadable:
            print(f"note: source {source.name}: run {run} cannot be read ({why}); it is listed as unreadable, "
                  "not ranked", file=sys.stderr)
    print(f"leaderboard of {built.runs} run(s) from {len(sources)} source(s): {built.entries} entr(y/ies) on "
          f"{built.boards} board(s), written to {args.out} in {time.perf_counter() - started:.1f} s; open "
          f"{args.out / 'index.html'}")
    return 0
