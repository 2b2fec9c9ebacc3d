"""The probe lock: which source digests of a method behave alike (read without torch).

One JSON file per package that provides adapters, ``<top-level package>/probe-lock.json`` (the
suite's: ``methods/probe-lock.json``; a plugin's or an import-path adapter's: beside its own
package), written by ``protobench check-code`` only::

    {"format": 1,
     "methods": {"protopnet": {
        "dtype": "float64",                         # what the probe ran in (benchmark/behaviour/probe.py)
        "configurations": {"default": {...}, ...},  # method_args of each probed configuration
        "behaviours": {"<id>": {"golden": {"default": {"logits": {"shape": [12, 3], "data": "<base64 f8>"}, ...}},
                                "recorded": "2026-12-07", "torch": "2.14.1"}},
        "sources": {"<source digest>": {"behaviour": "<id>", "blind": "<digest>", "deviation": 0.0,
                                        "checked": "2026-12-07"}}}},
     "harness": {"<harness source digest>": "<blind digest>"}}

A **behaviour** is a set of golden outputs; a source digest belongs to the behaviour whose golden
outputs its probe reproduced within :data:`TOLERANCE` (``deviation``: the largest relative
difference measured). ``blind`` is the digest of the code the probes cannot see
(benchmark/behaviour/boundary.py: the method's own, with the harness's of ``harness``): two sources
of one behaviour read alike only when it is equal too.
"""
from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.errors import ProtobenchError

LOCK_NAME = "probe-lock.json"
LOCK_FORMAT = 1  # bump with a new probe setup (benchmark/behaviour/probe.py): golden outputs of another are incomparable
#: the largest relative deviation (max |probe − golden| / max(1, max |golden|)) of one output that
#: still reads "identical", by the output's dtype: far above what another summation order moves it
#: (float64: ≤ 4e-14 measured; float32 outputs: ≤ 1.4e-6) and below what any float32 result resolves
#: (float64), resp. a few float32 roundings amplified by a temperature (docs/design/run-identity.md,
#: "The tolerance")
TOLERANCE: dict[str, float] = {"float64": 1e-9, "float32": 1e-5}
DTYPES = tuple(TOLERANCE)
_STORED = {"float64": "<f8", "float32": "<f4"}


class LockError(ProtobenchError):
    """A probe lock that cannot be used: one message naming the file, the line and the fix."""


@dataclass(frozen=True)
class SourceEntry:
    """What the lock says of one source digest of a method."""

    behaviour: str
    blind: str
    deviation: float
    checked: str


@dataclass(frozen=True)
class MethodLock:
    """One method's part of a lock."""

    dtype: str
    configurations: dict[str, dict[str, Any]]
    behaviours: dict[str, dict[str, Any]]  # id → {"golden": configuration → output → array, ...}
    sources: dict[str, SourceEntry]


@dataclass
class Lock:
    """A whole lock file, as read (:func:`read_lock`) or about to be written (:func:`write_lock`):
    its methods and, in the suite's lock, the digest of what no probe of the suite ran of each
    harness source it was checked with (``harness``: harness source digest → that blind digest)."""

    path: Path
    methods: dict[str, MethodLock]
    harness: dict[str, str] = field(default_factory=dict)

    def entry(self, method: str, digest: str) -> SourceEntry | None:
        found = self.methods.get(method)
        return None if found is None else found.sources.get(digest)


# ---- arrays in JSON -----------------------------------------------------------------------------
def encode_array(array: np.ndarray) -> dict[str, Any]:
    """A float32 or float64 array as ``{"dtype", "shape", "data"}``: its little-endian bytes in
    base64 (exact, compact)."""
    dtype = str(array.dtype)
    if dtype not in _STORED:
        raise ValueError(f"a probe output must be float32 or float64, not {dtype}")
    values = np.ascontiguousarray(array, dtype=_STORED[dtype])
    return {"dtype": dtype, "shape": list(values.shape), "data": base64.b64encode(values.tobytes()).decode("ascii")}


def decode_array(value: Any) -> np.ndarray:
    """The array of :func:`encode_array` (ValueError when it is not one)."""
    if not isinstance(value, dict) or not isinstance(value.get("shape"), list) or not isinstance(value.get("data"), str):
        raise ValueError("an output must be {\"dtype\": ..., \"shape\": [...], \"data\": \"<base64>\"}")
    dtype, shape = value.get("dtype"), value["shape"]
    if dtype not in _STORED:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(_STORED)}")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise ValueError(f"shape {shape!r} is not a list of sizes")
    raw = base64.b64decode(value["data"].encode("ascii"), validate=True)
    size = np.dtype(_STORED[dtype]).itemsize
    if len(raw) != size * math.prod(shape):
        raise ValueError(f"its data holds {len(raw) // size} values, its shape {shape} needs {math.prod(shape)}")
    return np.frombuffer(raw, dtype=_STORED[dtype]).astype(dtype).reshape(shape)


def behaviour_id(golden: Mapping[str, Mapping[str, np.ndarray]]) -> str:
    """A name for a set of golden outputs: sha256 over their bytes, 16 hex digits."""
    digest = hashlib.sha256()
    for configuration in sorted(golden):
        for output in sorted(golden[configuration]):
            array = golden[configuration][output]
            digest.update(f"{configuration}/{output}/{array.dtype}/{array.shape}".encode() + array.tobytes())
    return digest.hexdigest()[:16]


def deviation(probe: np.ndarray, golden: np.ndarray) -> float:
    """max |probe − golden| / max(1, max |golden|), in float64: 0 when equal (NaN where both are
    NaN), inf when their dtypes, shapes or NaN or infinity patterns differ."""
    if probe.shape != golden.shape or probe.dtype != golden.dtype:
        return math.inf
    probe, golden = probe.astype(np.float64), golden.astype(np.float64)
    finite_p, finite_g = np.isfinite(probe), np.isfinite(golden)
    if not np.array_equal(finite_p, finite_g) or not np.array_equal(probe[~finite_p], golden[~finite_g],
                                                                    equal_nan=True):
        return math.inf
    if not finite_g.any():
        return 0.0
    scale = max(1.0, float(np.abs(golden[finite_g]).max()))
    return float(np.abs(probe[finite_p] - golden[finite_g]).max()) / scale


# ---- reading --------------------------------------------------------------------------------------
def lock_path(adapter_module: str) -> Path | None:
    """Where the lock of the package holding ``adapter_module`` lies (found without importing it):
    ``probe-lock.json`` in its top-level package's directory, beside a top-level module; None when
    the module cannot be found."""
    import importlib.util

    top = adapter_module.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)  # locates, never executes
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / LOCK_NAME
    return Path(spec.origin).parent / LOCK_NAME if spec.origin else None


def line_of(text: str, *keys: str) -> int:
    """The 1-based line of the nested key path ``keys`` in a lock's text (as :func:`write_lock`
    lays it out: one key per line, one space of indent per level); the deepest key found."""
    lines = text.splitlines()
    start, found = 0, 1
    for depth, key in enumerate(keys, start=1):
        pattern = re.compile(r"^\s{%d}%s\s*:" % (depth, re.escape(json.dumps(key))))
        loose = re.compile(r"%s\s*:" % re.escape(json.dumps(key)))
        for number in range(start, len(lines)):
            if pattern.match(lines[number]) or loose.search(lines[number]):
                start, found = number + 1, number + 1
                break
        else:
            break
    return found


def _fail(path: Path, text: str, keys: tuple[str, ...], why: str) -> LockError:
    return LockError(f"{path}, line {line_of(text, *keys)}: {why}; run `protobench check-code "
                     f"{keys[1] if len(keys) > 1 else '--all'}` to rewrite it (or restore the file from version control)")


def read_lock(path: Path, known_method: Any = None) -> Lock | None:
    """The lock at ``path`` (None when there is none), checked whole: its JSON, its format, every
    method it names (``known_method(name) -> bool``; None: any), every golden output's shape and data
    and every source's behaviour. A lock that fails a check is one :class:`LockError` naming file and line.
    The lock is shared by every caller of this file version (readers judge each result by it): read
    it only; :func:`editable_lock` gives a copy to change."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _read_lock(str(path), stat.st_mtime_ns, stat.st_size, known_method)


def editable_lock(path: Path, known_method: Any = None) -> Lock | None:
    """A copy of :func:`read_lock`'s lock that ``check-code`` may add sources and harness entries to."""
    return copy.deepcopy(read_lock(path, known_method))


@lru_cache(maxsize=32)
def _read_lock(name: str, mtime: int, size: int, known_method: Any) -> Lock:
    path = Path(name)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as err:
        raise LockError(f"{path}: it is not UTF-8 text ({err.reason}); restore it from version control, or delete it "
                        "and run `protobench check-code --all`") from None
    except json.JSONDecodeError as err:
        raise LockError(f"{path}, line {err.lineno}: it is not valid JSON ({err.msg}); restore it from version "
                        "control, or delete it and run `protobench check-code --all`") from None
    except OSError as err:
        raise LockError(f"{path}: cannot be read ({err.strerror})") from None
    if not isinstance(data, dict) or data.get("format") != LOCK_FORMAT or not isinstance(data.get("methods"), dict):
        raise _fail(path, text, ("format",), f"a probe lock of format {LOCK_FORMAT} holds {{\"format\": {LOCK_FORMAT}, "
                                             "\"methods\": {...}}")
    methods = {name: _method(path, text, name, value, known_method) for name, value in data["methods"].items()}
    harness = data.get("harness", {})
    if not isinstance(harness, dict) or not all(isinstance(v, str) for v in harness.values()):
        raise _fail(path, text, ("harness",), "harness maps harness source digests to blind digests")
    return Lock(path, methods, dict(harness))


def _method(path: Path, text: str, name: str, value: Any, known_method: Any) -> MethodLock:
    where = ("methods", name)
    if known_method is not None and not known_method(name):
        raise _fail(path, text, where, f"method {name!r} does not exist here")
    if not isinstance(value, dict):
        raise _fail(path, text, where, "a method's entry must be an object")
    dtype = value.get("dtype")
    if dtype not in DTYPES:
        raise _fail(path, text, (*where, "dtype"), f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    configurations = value.get("configurations")
    if not isinstance(configurations, dict) or not all(isinstance(a, dict) for a in configurations.values()):
        raise _fail(path, text, (*where, "configurations"), "configurations must map names to method_args")
    behaviours: dict[str, dict[str, Any]] = {}
    for key, behaviour in (value.get("behaviours") or {}).items():
        golden = behaviour.get("golden") if isinstance(behaviour, dict) else None
        if not isinstance(golden, dict):
            raise _fail(path, text, (*where, "behaviours", key), "a behaviour holds its golden outputs")
        arrays: dict[str, dict[str, np.ndarray]] = {}
        for configuration, outputs in golden.items():
            if configuration not in configurations or not isinstance(outputs, dict):
                raise _fail(path, text, (*where, "behaviours", key, "golden", configuration),
                            f"golden outputs of configuration {configuration!r}, which the entry does not list")
            arrays[configuration] = {}
            for output, encoded in outputs.items():
                try:
                    arrays[configuration][output] = decode_array(encoded)
                except (ValueError, TypeError, UnicodeEncodeError) as err:
                    raise _fail(path, text, (*where, "behaviours", key, "golden", configuration, output),
                                f"golden output {output!r} of {configuration!r}: {err}") from None
        behaviours[key] = {**behaviour, "golden": arrays}
    sources: dict[str, SourceEntry] = {}
    for digest, entry in (value.get("sources") or {}).items():
        ok = isinstance(entry, dict) and entry.get("behaviour") in behaviours and isinstance(entry.get("blind"), str) \
            and isinstance(entry.get("deviation"), (int, float)) and isinstance(entry.get("checked"), str)
        if not ok:
            raise _fail(path, text, (*where, "sources", digest),
                        "a source names one of the entry's behaviours, its blind digest, deviation and date")
        sources[digest] = SourceEntry(entry["behaviour"], entry["blind"], float(entry["deviation"]), entry["checked"])
    return MethodLock(dtype, {k: dict(v) for k, v in configurations.items()}, behaviours, sources)


# ---- writing (check-code only) ---------------------------------------------------------------------
def tolerance_of(golden: np.ndarray) -> float:
    """The tolerance of one golden output (:data:`TOLERANCE` by its dtype)."""
    return TOLERANCE[str(golden.dtype)]


def today() -> str:
    return datetime.date.today().isoformat()


def lock_json(lock: Lock) -> str:
    """The lock's text: sorted keys, one key per line (:func:`line_of` relies on it)."""
    methods: dict[str, Any] = {}
    for name, entry in lock.methods.items():
        behaviours = {key: {**value, "golden": {c: {o: encode_array(a) for o, a in outputs.items()}
                                                 for c, outputs in value["golden"].items()}}
                      for key, value in entry.behaviours.items()}
        sources = {digest: {"behaviour": s.behaviour, "blind": s.blind, "deviation": s.deviation, "checked": s.checked}
                   for digest, s in entry.sources.items()}
        methods[name] = {"dtype": entry.dtype, "configurations": entry.configurations, "behaviours": behaviours,
                         "sources": sources}
    document: dict[str, Any] = {"format": LOCK_FORMAT, "methods": methods}
    if lock.harness:
        document["harness"] = lock.harness
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def write_lock(lock: Lock) -> None:
    """Write ``lock`` atomically (a reader sees the old file or the new one, never half)."""
    from benchmark.run.store import atomic_write_bytes

    atomic_write_bytes(lock.path, lock_json(lock).encode("utf-8"))
    _read_lock.cache_clear()
