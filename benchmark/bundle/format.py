"""A bundle's format record, ``bundle.json``: which layout of runs a bundle holds, so that a reader
(``leaderboard``) refuses a bundle written by a newer protobench instead of misreading it. A
bundle written before the record existed has none and is read as version 1 (the same layout)."""
from __future__ import annotations

import json
from pathlib import Path

from benchmark.errors import ProtobenchError

BUNDLE_FILE = "bundle.json"
BUNDLE_FORMAT = "protobench-bundle"
#: the bundle layouts this code reads: ``<grid>/<run_id>/`` with result.json and its records
READ_VERSIONS = (1,)
BUNDLE_VERSION = READ_VERSIONS[-1]


def bundle_record() -> bytes:
    """The ``bundle.json`` :func:`benchmark.bundle.make.make_bundle` writes (no clock: the same
    runs give the same bytes)."""
    return (json.dumps({"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION}, sort_keys=True) + "\n").encode()


def bundle_version(root: Path) -> int:
    """The layout version of the bundle at ``root`` (1 without a record); a version this code does
    not read, or a record that is not one, is refused naming the bundle."""
    path = root / BUNDLE_FILE
    if not path.exists():
        return 1
    try:
        data = json.loads(path.read_bytes()) if path.is_file() and path.stat().st_size < 4096 else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT or isinstance(data.get("version"), bool) \
            or not isinstance(data.get("version"), int):
        raise ProtobenchError(f"{path} is not a protobench bundle record (format {BUNDLE_FORMAT!r}, an integer "
                              "version); the bundle was altered or is not a protobench bundle: ask for it again")
    if data["version"] not in READ_VERSIONS:
        raise ProtobenchError(f"bundle {root} has format version {data['version']}; this protobench reads version(s) "
                              f"{', '.join(map(str, READ_VERSIONS))}: upgrade protobench (pip install -U protobench) "
                              "to read it")
    return int(data["version"])
