"""The commands around data and names: ``make-data`` (a synthetic dataset), ``list`` (methods,
backbones, datasets, grids) and ``cache`` (token-cache entries)."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from datetime import datetime
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

from benchmark.cache.admin import list_cache, remove_cache, verify_cache
from benchmark.cli.common import cache_root_of
from benchmark.data.declared import known_datasets
from benchmark.errors import ProtobenchError, did_you_mean


LIST_SECTIONS = ("methods", "backbones", "datasets", "grids")
#: make-data KIND → (module, its defaults, its generator); the dataset a grid then names is KIND
GENERATORS: dict[str, tuple[str, str, str]] = {
    "synthbirds": ("benchmark.data.synthbirds", "SYNTHBIRDS_DEFAULTS", "generate_synthbirds"),
    "nabirds": ("benchmark.data.synthetic_nabirds", "NABIRDS_DEFAULTS", "generate_nabirds"),
    "partimagenet": ("benchmark.data.synthetic_partimagenet", "PARTIMAGENET_DEFAULTS", "generate_partimagenet"),
    "funnybirds": ("benchmark.data.synthetic_funnybirds", "FUNNYBIRDS_DEFAULTS", "generate_funnybirds"),
}


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``make-data``, ``list`` and ``cache`` to ``sub``."""
    p = sub.add_parser("make-data", help="generate a small synthetic dataset in an official layout: synthbirds "
                                         "(CUB-200-2011's), nabirds (NABirds'), partimagenet (PartImageNet_Seg's), "
                                         "funnybirds (FunnyBirds', "
                                         "with its rendered interventions)")
    p.add_argument("kind", help=f"what to generate: {', '.join(GENERATORS)}")
    p.add_argument("--out", required=True, help="folder to write the dataset to")
    for option in ("classes", "images-per-class", "seed"):
        p.add_argument(f"--{option}", type=int, help="default: the kind's defaults (SYNTHBIRDS_DEFAULTS, "
                                                     "NABIRDS_DEFAULTS, PARTIMAGENET_DEFAULTS, FUNNYBIRDS_DEFAULTS), printed when written")
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


def cmd_make_data(args: argparse.Namespace) -> int:
    if args.kind not in GENERATORS:
        raise ProtobenchError(f"unknown generator {args.kind!r}{did_you_mean(args.kind, GENERATORS)}; the suite "
                              f"generates {', '.join(map(repr, GENERATORS))}")
    module, defaults, function = GENERATORS[args.kind]
    home = importlib.import_module(module)
    given = {"classes": args.classes, "images_per_class": args.images_per_class, "seed": args.seed}
    chosen = {**getattr(home, defaults), **{k: v for k, v in given.items() if v is not None}}
    out = getattr(home, function)(args.out, **chosen)
    print(f"wrote {args.kind} ({chosen['classes']} classes × {chosen['images_per_class']} images, "
          f"seed {chosen['seed']}) to {out}")
    return 0


def _listing(pattern: str | None, sections: tuple[str, ...]) -> dict[str, object]:
    """What ``protobench list`` shows, each section filtered by ``pattern`` (a case-insensitive
    substring or shell glob of the name); a pattern with ':' names a method by import path.
    Backbones: the aliases, and every ``timm:NAME`` trunk when a pattern or the section is given."""
    from benchmark.method_lookup import declaration
    from benchmark.trunks import ALIASES, installed_trunks
    from methods.registry import list_methods

    wildcard = pattern is not None and any(c in pattern for c in "*?[")

    def keep(name: str) -> bool:
        if pattern is None:
            return True
        return fnmatch(name.lower(), pattern.lower()) if wildcard else pattern.lower() in name.lower()

    methods = [pattern] if pattern and ":" in pattern else [m for m in list_methods() if keep(m)]
    grids = sorted(p.name for p in resources.files("benchmark").joinpath("grids").iterdir() if p.name.endswith(".toml"))
    if pattern is None and sections != ("backbones",):  # no timm import: the declared trunks
        backbones = {k: trunk.timm_name for k, trunk in sorted(ALIASES.items())}
    else:
        from benchmark.backbones import list_backbones

        backbones = dict(list_backbones(None if pattern is None else pattern.lower() if wildcard
                                        else f"*{pattern.lower()}*"))
    backbones.update({k: f"{trunk.factory} (from {provider.label()})" for k, (trunk, provider)
                      in sorted(installed_trunks().items()) if keep(k)})
    return {
        "methods": {m: declaration(m).defaults() for m in methods},
        "backbones": backbones,
        "datasets": [d for d in known_datasets() if keep(d)],
        "grids": [g for g in grids if keep(g)],
    }


def cmd_list(args: argparse.Namespace) -> int:
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
        print(f"nothing named like {terms[0]!r} in {', '.join(sections)}"
              f"{did_you_mean(terms[0], LIST_SECTIONS) if len(sections) > 1 else ''}")
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


def cmd_cache(args: argparse.Namespace) -> int:
    cache_dir = cache_root_of(args, Path(args.runs_dir))
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
