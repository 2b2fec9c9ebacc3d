"""Who is building a cache entry, whether they are still alive, and a lock that works across nodes.

``flock`` is node-local on the filesystems clusters share (Lustre mounted with ``localflock``,
NFS with ``local_lock=flock``/``all``, GPFS set-ups without cluster-wide locking), so the build
lock is a file created with ``O_EXCL`` (atomic on Lustre, GPFS and NFSv3+) that records its
owner (host, pid, the pid's start time, the pid namespace and boot, when it started) and whose
mtime a heartbeat thread refreshes. An owner is provably dead when it ran on this host in this
pid namespace since this boot and its pid is gone (or is another process now), or when its
heartbeat is older than ``STALE_AFTER_SECONDS`` by the filesystem's clock (a file touched now on
the same filesystem, so node clock skew does not count). A pid from another namespace (a
container sharing the hostname) or another boot says nothing here: only the heartbeat counts.

The lock only saves work: the store is correct when two builders hold it at once.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from benchmark.errors import ProtobenchError

#: how often an owner refreshes its heartbeat files
HEARTBEAT_SECONDS = 30.0
#: a heartbeat older than this marks its owner dead (20 missed beats: a stalled filesystem is not death)
STALE_AFTER_SECONDS = 600.0
#: how long a builder waits for another live builder of the same entry before giving up
LOCK_TIMEOUT_SECONDS = 4 * 3600.0
POLL_SECONDS = 1.0


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (Linux ``/proc``), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name


def pid_space() -> str | None:
    """This process's pid namespace and the kernel's boot id: pids are comparable only between
    processes that share both (None when /proc does not say)."""
    try:
        return f"{Path('/proc/sys/kernel/random/boot_id').read_text().strip()}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


@dataclass(frozen=True)
class Owner:
    """The process that holds a lock or runs a build."""

    host: str
    pid: int
    pid_start: str | None
    started: str
    pid_space: str | None = None  # :func:`pid_space` of the owner (None: unknown, its pid is not checked)

    @classmethod
    def current(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), _process_start(os.getpid()),
                   datetime.now(timezone.utc).isoformat(timespec="seconds"), pid_space())

    @classmethod
    def read(cls, path: Path) -> Owner | None:
        """The owner recorded in ``path``, or None when it is missing or half-written."""
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} (since {self.started})"

    def alive_here(self) -> bool:
        """Whether this owner, which ran on this host, still runs (the same process, not a reused pid)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # another user's live process
        start = _process_start(self.pid)
        return self.pid_start is None or start is None or start == self.pid_start


def filesystem_now(directory: Path) -> float:
    """The current time by the clock that stamps mtimes in ``directory`` (for comparing heartbeats)."""
    probe = directory / f".clock-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.touch()
        return probe.stat().st_mtime
    except OSError:
        return time.time()
    finally:
        probe.unlink(missing_ok=True)


def is_dead(owner: Owner | None, heartbeat: Path, now: float) -> bool:
    """Whether the process recorded as ``owner`` (None: not recorded yet), beating ``heartbeat``,
    is provably gone; ``now`` from :func:`filesystem_now`. Its pid is asked only when it shares
    this process's host, pid namespace and boot; otherwise its heartbeat decides."""
    here = pid_space()
    if owner is not None and owner.host == socket.gethostname() and here is not None and owner.pid_space == here:
        return not owner.alive_here()
    try:
        return now - heartbeat.stat().st_mtime > STALE_AFTER_SECONDS
    except FileNotFoundError:
        return True


class Heartbeat:
    """Touches a set of files every ``HEARTBEAT_SECONDS`` from a daemon thread while entered."""

    def __init__(self) -> None:
        self._paths: set[Path] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="cache-heartbeat", daemon=True)

    def add(self, path: Path) -> None:
        with self._guard:
            self._paths.add(path)

    def discard(self, path: Path) -> None:
        with self._guard:
            self._paths.discard(path)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with self._guard:
                paths = list(self._paths)
            for path in paths:
                try:
                    os.utime(path)
                except OSError:
                    pass  # removed meanwhile: nothing to keep alive

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _break(path: Path, judged: Owner | None) -> None:
    """Remove the lock file of a dead owner, unless it changed hands since it was judged."""
    if Owner.read(path) != judged:
        return
    aside = path.with_name(f"{path.name}.broken-{secrets.token_hex(4)}")
    try:
        os.rename(path, aside)  # atomic: of two breakers, one moves it
    except FileNotFoundError:
        return
    aside.unlink(missing_ok=True)


@contextmanager
def build_lock(path: Path, heartbeat: Heartbeat, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the lock file ``path`` (created ``O_EXCL``) while building; waits while a live owner
    holds it, takes it over from a dead one, and after ``timeout`` seconds (default
    ``LOCK_TIMEOUT_SECONDS``) stops with an error naming the holder."""
    timeout = LOCK_TIMEOUT_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + timeout
    path.parent.mkdir(parents=True, exist_ok=True)
    me = Owner.current()
    told = False
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            holder = Owner.read(path)
            if is_dead(holder, path, filesystem_now(path.parent)):
                _break(path, holder)
                continue
            who = holder.describe() if holder else "a process that has not yet written its name"
            if not told:  # a job log then says why it waits
                print(f"token cache: waiting for {who}, which builds {path.stem}", file=sys.stderr, flush=True)
                told = True
            if time.monotonic() > deadline:
                raise ProtobenchError(
                    f"Waited {timeout:.0f} s for the token-cache lock {path}, held by {who}, which is still alive "
                    f"(heartbeat within {STALE_AFTER_SECONDS:.0f} s); wait for it to finish, or if that process is "
                    f"gone, delete {path}."
                ) from None
            time.sleep(POLL_SECONDS)
            continue
        os.close(fd)
        me.write(path)
        break
    heartbeat.add(path)
    try:
        yield
    finally:
        heartbeat.discard(path)
        if Owner.read(path) == me:
            path.unlink(missing_ok=True)
