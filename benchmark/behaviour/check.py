"""``protobench check-code METHOD``: run a method's behaviour probe and record the answer in its lock.

The probes run in one child process with pinned arithmetic (benchmark/behaviour/child.py), under
coverage.py, so one pass gives each method's outputs and the lines it ran; the lines give the blind
digest (benchmark/behaviour/boundary.py). The outputs are compared with every behaviour the lock
knows for the method, configuration by configuration: the source digest joins the first
behaviour all of whose golden outputs it reproduces within their tolerance
(:data:`benchmark.behaviour.lock.TOLERANCE`), else it starts a new behaviour (its outputs become
that behaviour's golden ones). Either way the lock records the digest, its behaviour, its blind
digest and the largest deviation measured. A probe that raises is reported with its exception and
recorded nowhere: it never counts as identical.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmark.behaviour.boundary import BlindStatement, blind_digest, boundary
from benchmark.behaviour.lock import (Lock, LockError, MethodLock, SourceEntry, behaviour_id, deviation, editable_lock,
                                      line_of, lock_path, today, tolerance_of, write_lock)
from benchmark.behaviour.setup import DEFAULT_CONFIGURATION, HARNESS, HARNESS_METHOD, PINNED_ARITHMETIC, configurations
from benchmark.errors import ProtobenchError
from benchmark.method_lookup import known_method
from benchmark.run.identity import harness_digest, harness_files, method_fingerprint, method_lock_path, probed_files

Outputs = dict[str, dict[str, np.ndarray]]
#: the suite's probe lock (methods/probe-lock.json), which also keeps the harness's blind digests
SUITE_LOCK: Path = lock_path("methods")  # type: ignore[assignment]


@dataclass
class Probed:
    """One probe: its outputs, the dtype it ran in, the lines it ran (module → lines), how long it
    took and the arithmetic it ran in."""

    dtype: str
    outputs: Outputs
    executed: dict[str, set[int]]
    seconds: float
    arithmetic: dict[str, str]


@dataclass
class Verdict:
    """What ``check-code`` found for one method."""

    method: str
    digest: str
    behaviour: str | None = None  # the behaviour it belongs to (None: the probe failed)
    new_behaviour: bool = False  # no known behaviour matched: its outputs are the new golden ones
    deviation: float = math.nan  # the largest relative deviation from the matched behaviour's golden outputs
    closest: tuple[float, str, str] | None = None  # where a changed behaviour differs most (ratio, config, output)
    blind: list[BlindStatement] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    blind_changed: tuple[int, int] = (0, 0)  # (earlier sources of its behaviour whose blind digest differs, of all)

    def line(self) -> str:
        if self.error is not None:
            return f"{self.method}: the probe failed: {self.error}; nothing recorded (it never counts as identical)"
        where = f"source {self.digest[:12]}, {len(self.blind)} statements beyond the probe, {self.seconds:.1f} s"
        if not self.new_behaviour:
            differ, earlier = self.blind_changed
            beyond = (f"; what the probe cannot see differs from {differ} of its {earlier} earlier source(s): their "
                      "results read stale by bytes" if differ else "")
            return (f"{self.method}: behaviour identical to {self.behaviour} (max relative deviation "
                    f"{self.deviation:.1e}, within tolerance; {where}){beyond}")
        if self.closest is None:
            return f"{self.method}: first behaviour recorded, {self.behaviour} ({where})"
        ratio, configuration, output = self.closest
        return (f"{self.method}: behaviour CHANGED: now {self.behaviour} (its {output!r} of configuration "
                f"{configuration!r} is {ratio:.1e} × its tolerance from the closest earlier behaviour); results "
                f"trained before read stale ({where})")


def run_probes(requests: list[tuple[str, str | None]], *, pinned: bool = True,
               environment: Mapping[str, str] | None = None) -> list[Probed | str]:
    """Each (method, dtype or None) of ``requests`` probed in one child process with
    :data:`PINNED_ARITHMETIC` (``pinned``; else without it) and ``environment`` on top; a probe that
    failed gives its error."""
    env = {key: value for key, value in os.environ.items() if pinned or key not in PINNED_ARITHMETIC}
    env.update({**(PINNED_ARITHMETIC if pinned else {}), **(environment or {}),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())})  # the parent's imports
    with tempfile.TemporaryDirectory(prefix="protobench-probe-") as folder:
        out = Path(folder)
        argv = [sys.executable, "-m", "benchmark.behaviour.child", "--out", str(out),
                *(f"{method}={dtype}" if dtype else method for method, dtype in requests)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        found: list[Probed | str] = []
        for index, (method, _) in enumerate(requests):
            record_path = out / f"{index}.json"
            if not record_path.is_file():
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
                found.append(f"the probe process ended before {method!r} ({tail[0]})")
                continue
            record = json.loads(record_path.read_text())
            if "error" in record:
                found.append(record["error"])
                continue
            with np.load(out / f"{index}.npz") as arrays:
                outputs: Outputs = {}
                for key in arrays.files:
                    configuration, _, output = key.partition("/")
                    outputs.setdefault(configuration, {})[output] = arrays[key]
            executed = {module: set(lines) for module, lines in record["executed"].items()}
            found.append(Probed(record["dtype"], outputs, executed, record["seconds"], record["arithmetic"]))
        return found


def closest(outputs: Outputs, golden: Outputs) -> tuple[float, str, str]:
    """The largest deviation over the configurations both hold, as a multiple of the output's
    tolerance, with where it is (an output one side lacks: infinite)."""
    ratios = [(math.inf if outputs[c].get(o) is None or golden[c].get(o) is None
               else deviation(outputs[c][o], golden[c][o]) / tolerance_of(golden[c][o]), c, o)
              for c in sorted(set(outputs) & set(golden)) for o in sorted(set(outputs[c]) | set(golden[c]))]
    return max(ratios)


def largest_deviation(outputs: Outputs, golden: Outputs) -> float:
    """The largest relative deviation over the configurations and outputs both hold."""
    return max(deviation(outputs[c][o], golden[c][o])
               for c in set(outputs) & set(golden) for o in set(outputs[c]) & set(golden[c]))


def _check_shapes(lock: Lock, method: str, outputs: Outputs) -> None:
    """A lock whose golden outputs cannot be the probe's (another shape) is refused, naming its line."""
    entry = lock.methods[method]
    text = lock.path.read_text(encoding="utf-8")
    for key, behaviour in entry.behaviours.items():
        for configuration, golden in behaviour["golden"].items():
            for output, array in golden.items():
                probe = outputs.get(configuration, {}).get(output)
                if probe is not None and probe.shape != array.shape:
                    line = line_of(text, "methods", method, "behaviours", key, "golden", configuration, output)
                    raise LockError(f"{lock.path}, line {line}: golden output {output!r} of {method!r} ({configuration}) "
                                    f"has shape {list(array.shape)}, the probe gives {list(probe.shape)}; the lock was "
                                    f"written by another probe: restore it from version control, or remove "
                                    f"{method!r} from it and run `protobench check-code {method}`")


def method_blind(method: str, probed: Probed) -> list[BlindStatement]:
    """What ``method``'s probe cannot judge of the method's own files (the harness's: :func:`harness_blind`)."""
    files = probed_files(method)
    return boundary(files, probed.executed, emit=frozenset(files) - frozenset(harness_files()))


def harness_blind(probes: list[Probed]) -> list[BlindStatement]:
    """What no probe of ``probes`` (every method's and the harness's) ran of the harness modules."""
    union: dict[str, set[int]] = {}
    for probed in probes:
        for module, lines in probed.executed.items():
            union.setdefault(module, set()).update(lines)
    return boundary(harness_files(), union)


def entry_blind(method: list[BlindStatement], harness: str) -> str:
    """A source's blind digest: its method files' with the harness's (``harness``, a digest)."""
    return hashlib.sha256(f"{blind_digest(method)}:{harness}".encode()).hexdigest()


def judge(method: str, digest: str, probed: Probed, blind: list[BlindStatement], harness: str,
          known: MethodLock | None) -> tuple[Verdict, MethodLock]:
    """The verdict on ``probed`` (``blind``: what it cannot judge of the method's files;
    ``harness``: the harness's blind digest) against the lock's entry ``known``, and the entry
    that records it."""
    verdict = Verdict(method, digest, blind=blind, seconds=probed.seconds)
    if known is not None and known.dtype != probed.dtype:  # check_code probes in the lock's dtype
        raise ProtobenchError(f"{method}: probed in {probed.dtype}, its lock holds {known.dtype} outputs")
    behaviours = dict(known.behaviours) if known is not None else {}
    nearest: tuple[float, str, str] | None = None
    for key, behaviour in behaviours.items():
        shared = set(behaviour["golden"]) & set(probed.outputs)
        if not shared:
            continue
        gap = closest({c: probed.outputs[c] for c in shared}, behaviour["golden"])
        if gap[0] <= 1.0:
            verdict.behaviour = key
            verdict.deviation = largest_deviation(probed.outputs, behaviour["golden"])
            # configurations new to the lock (a variant declared since) join the behaviour's golden outputs
            behaviours[key] = {**behaviour, "golden": {**probed.outputs, **behaviour["golden"]}}
            break
        nearest = gap if nearest is None or gap[0] < nearest[0] else nearest
    if verdict.behaviour is None:
        verdict.behaviour, verdict.new_behaviour, verdict.closest = behaviour_id(probed.outputs), True, nearest
        verdict.deviation = 0.0
        behaviours[verdict.behaviour] = {"golden": probed.outputs, "recorded": today(), **probed.arithmetic}
    sources = dict(known.sources) if known is not None else {}
    combined = entry_blind(blind, harness)
    earlier = [s for d, s in sources.items() if d != digest and s.behaviour == verdict.behaviour]
    verdict.blind_changed = (sum(s.blind != combined for s in earlier), len(earlier))
    sources[digest] = SourceEntry(verdict.behaviour, combined, verdict.deviation, today())
    merged = {**(known.configurations if known is not None else {}), **configurations(method)}
    return verdict, MethodLock(probed.dtype, merged, behaviours, sources)


def harness_mismatch(harness: Probed, alone: Probed) -> str | None:
    """Why the harness probe's lockstep members do not give :data:`HARNESS_METHOD`'s probe alone
    (None: they do, within the tolerance)."""
    golden = {DEFAULT_CONFIGURATION: alone.outputs[DEFAULT_CONFIGURATION]}
    for member, outputs in sorted(harness.outputs.items()):
        ratio, _, output = closest({DEFAULT_CONFIGURATION: outputs}, golden)
        if ratio > 1.0:
            return (f"the lockstep member {member} of tune --batch gives {HARNESS_METHOD}'s {output!r} {ratio:.1e} × "
                    "its tolerance away from the run alone")
    return None


def check_code(methods: list[str], *, log: Callable[[str], None] = print) -> list[Verdict]:
    """Probe each of ``methods`` and record the answers in their locks (one write per lock file).
    When the suite's lock has not seen the current harness (the training loop and what it reads),
    every suite method and the harness probe run too: what no probe runs of the harness is known
    only from all of them (:func:`harness_blind`)."""
    from methods.registry import BUILTIN_METHODS

    suite = editable_lock(SUITE_LOCK, known_method) or Lock(SUITE_LOCK, {})
    harness_source = harness_digest()
    if harness_source not in suite.harness:
        if not set(BUILTIN_METHODS) <= set(methods):
            log("the harness changed since the probe lock was written: probing every method of the suite")
        methods = list(dict.fromkeys([*methods, *BUILTIN_METHODS]))
    locks: dict[Path, Lock] = {SUITE_LOCK: suite}
    requests: list[tuple[str, str | None]] = []
    for method in methods:
        path = method_lock_path(method)
        if path is None:
            raise ProtobenchError(f"method {method!r}: no package directory to keep its probe lock in")
        if path not in locks:
            locks[path] = editable_lock(path, known_method) or Lock(path, {})
        known = locks[path].methods.get(method)
        requests.append((method, known.dtype if known else None))
    with_harness = harness_source not in suite.harness
    probes = run_probes(requests + ([(HARNESS, None)] if with_harness else []))
    if with_harness:
        found = dict(zip([m for m, _ in requests] + [HARNESS], probes))
        failed = [f"{m}: {p}" for m, p in found.items() if isinstance(p, str)]
        mismatch = None if failed else harness_mismatch(found[HARNESS], found[HARNESS_METHOD])  # type: ignore[arg-type]
        if failed or mismatch:
            raise ProtobenchError("the harness cannot be judged while a probe fails or disagrees: "
                                  + "; ".join(failed or [mismatch]))  # type: ignore[list-item]
        suite.harness[harness_source] = blind_digest(harness_blind([p for p in probes if not isinstance(p, str)]))
        probes = probes[:-1]
    harness = suite.harness[harness_source]
    verdicts, changed = [], {SUITE_LOCK} if with_harness else set()
    for (method, _), probed in zip(requests, probes):
        lock = locks[method_lock_path(method)]  # type: ignore[index]
        digest = method_fingerprint(method)
        if isinstance(probed, str):
            verdicts.append(Verdict(method, digest, error=probed))
        else:
            if method in lock.methods:
                _check_shapes(lock, method, probed.outputs)
            verdict, lock.methods[method] = judge(method, digest, probed, method_blind(method, probed), harness,
                                                  lock.methods.get(method))
            verdicts.append(verdict)
            changed.add(lock.path)
        log(verdicts[-1].line())
    for path in changed:  # a lock none of whose methods was probed is left as it was
        write_lock(locks[path])
    return verdicts
