"""Helpers shared by test modules: where the helpers and the checkout are, git in a scratch
repository, and waits on state whose deadlines scale with ``PROTOBENCH_TEST_TIMEOUT_SCALE`` (default 1; CI on a busy
machine raises it, e.g. to 3, so tests slow down instead of failing)."""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

HELPERS = Path(__file__).resolve().parent  # on sys.path: pyproject.toml [tool.pytest.ini_options] pythonpath
REPO = HELPERS.parents[1]
TIMEOUT_SCALE_ENV = "PROTOBENCH_TEST_TIMEOUT_SCALE"
T = TypeVar("T")


def timeout_scale() -> float:
    raw = os.environ.get(TIMEOUT_SCALE_ENV, "1")
    try:
        scale = float(raw)
    except ValueError:
        scale = float("nan")
    if not scale > 0:  # also rejects nan
        raise pytest.UsageError(f"{TIMEOUT_SCALE_ENV}={raw!r} must be a positive number (a factor on every deadline)")
    return scale


def scaled(seconds: float) -> float:
    """A deadline of ``seconds`` on an idle machine, stretched by ``PROTOBENCH_TEST_TIMEOUT_SCALE``."""
    return seconds * timeout_scale()


def wait_until(predicate: Callable[[], T], what: str, timeout_s: float, *, poll_s: float = 0.5,
               context: Callable[[], str] = lambda: "", progress: Callable[[], object] | None = None) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); past the scaled deadline
    fail naming ``what`` and ``context()`` (e.g. the scheduler's queue). With ``progress`` (e.g.
    the epochs a job finished) the deadline counts from the last change of its value: work that
    keeps advancing on a slow machine is waited for, work that stalls fails."""
    limit = scaled(timeout_s)
    end = time.monotonic() + limit
    seen = progress() if progress else None
    while True:
        value = predicate()
        if value:
            return value
        if progress is not None and (now := progress()) != seen:
            seen, end = now, time.monotonic() + limit
        if time.monotonic() >= end:
            stalled = f" with no progress (last: {seen!r})" if progress else ""
            pytest.fail(f"timed out after {limit:.0f} s{stalled} ({TIMEOUT_SCALE_ENV}={timeout_scale():g}) "
                        f"waiting for {what}\n{context()}")
        time.sleep(poll_s)


def git(repo: Path, *args: str) -> str:
    """``git ARGS`` in ``repo`` with a throw-away identity; its stdout."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


#: relative tolerance of "the same metrics" across processes (docs/guides/slurm.md,
#: reproducibility): a job runs in a fresh process whose CPU thread pools (torch intra-op, MKL,
#: OpenMP) are sized by its own host and cgroup, and MKL's dynamic threading may use fewer threads
#: under load, so a float32 reduction can be split differently and round its last bit differently
#: (seen: 39.04911050 vs 39.04911053, 7e-10 relative). 1e-6 is far above float32 reassociation of
#: these sums and far below any difference a table shows (0.1 at 1 decimal of a percentage).
METRIC_RTOL = 1e-6


def assert_same_metrics(ours: dict[str, float | None], reference: dict[str, float | None]) -> None:
    """The same metric names, the same missing ones, every value within ``METRIC_RTOL``."""
    assert ours.keys() == reference.keys(), (sorted(ours), sorted(reference))
    for name, value in ours.items():
        expected = reference[name]
        if value is None or expected is None:
            assert value is expected, f"{name}: {value!r} != {expected!r}"
        else:
            assert value == pytest.approx(expected, rel=METRIC_RTOL, abs=1e-12, nan_ok=True), name
