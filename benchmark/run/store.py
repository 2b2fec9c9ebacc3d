"""The results store: one directory per run, files written atomically.

``runs/<grid>/<run_id>/{spec.json, checkpoint.pt, result.json, log.txt, metrics.jsonl, failure.json, .lock}``
(a pruned tuning trial: ``pruned.json`` instead of ``result.json`` and ``checkpoint.pt``).
A run is complete iff ``result.json`` exists and parses (docs/design/architecture.md, rules of thumb).
Files and folders are created with the user's umask, so a lab sharing a runs directory can
read each other's results.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.errors import ProtobenchError

SPEC_FILE = "spec.json"
RESULT_FILE = "result.json"
FAILURE_FILE = "failure.json"
PRUNED_FILE = "pruned.json"  # a tuning trial stopped early by its study's pruner (benchmark/run/epoch_score.py)
CHECKPOINT_FILE = "checkpoint.pt"
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"  # one JSON object per trained epoch (benchmark.run.epochlog)
#: the record tables beside result.json (benchmark.run.records): ``per_image`` and ``per_prototype`` from
#: ``evaluate``, ``robustness`` from the robustness stage (benchmark/robustness/stage.py) where it ran
ROBUSTNESS_TABLE = "robustness"
RECORD_TABLES = ("per_image", "per_prototype", ROBUSTNESS_TABLE)
RECORD_SUFFIXES = (".parquet", ".csv.gz")  # Parquet with pyarrow, else gzip CSV
RECORD_FILES = tuple(f"{table}{suffix}" for table in RECORD_TABLES for suffix in RECORD_SUFFIXES)
#: the robustness stage's working files (benchmark/robustness/): its finished batches (a folder), its
#: submissions (as job.json), why it failed, the job ``protobench cancel`` cancelled; a stale result's
#: re-run deletes them with the result (benchmark/run/identity.py)
STAGE_PARTIAL_DIR = "robustness.partial"
STAGE_JOB_FILE = "robustness.job.json"
STAGE_FAILURE_FILE = "robustness.failure.json"
STAGE_CANCELLED_FILE = "robustness.cancelled.json"
#: the files that hold a run's scores: what ``bundle`` carries and checksums, what ``leaderboard`` reads of a
#: run (verified, re-scored) and tells copies apart by
SCORED_FILES = (RESULT_FILE, *RECORD_FILES)
LOCK_FILE = ".lock"  # flock-ed by the process training the run; never deleted (see run_lock)
# Files only the lock holder writes: their temporary files left by a killed process are stale
# once the lock is held. (spec.json and job.json are also written by a submitting process
# that holds no lock, so their temporary files may be in flight.)
LOCKED_FILES = (CHECKPOINT_FILE, RESULT_FILE, FAILURE_FILE, PRUNED_FILE, METRICS_FILE, *RECORD_FILES)
UNLOCKED_FILES = (SPEC_FILE, "job.json")  # also written by a submitting process, in milliseconds
UNLOCKED_TEMP_STALE_S = 3600.0  # a temporary file of those this old was left by a killed writer
LOCK_TEXT = re.compile(r"pid (?P<pid>\d+) on (?P<host>\S+) since (?P<since>\S+)")  # what run_lock writes
TOKEN_CACHE_DIR = ".token-cache"  # under the runs directory, beside the grid folders
FREE_SPACE_MARGIN = 64 * 2**20  # bytes left free beyond a file we write: logs, result.json, other writers
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})  # no space, quota, file-size limit
# Bounds of what a run file may hold (:func:`parse_run_json`): the suite's own files nest a few
# levels and hold integers of a few digits; a hostile file must cost one run, not the directory.
MAX_JSON_DEPTH = 32
MAX_JSON_INT_DIGITS = 40
_JSON_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def default_cache_root(runs_root: Path) -> Path:
    """Where the token cache of a runs directory lives unless ``--cache-dir`` says otherwise."""
    return Path(runs_root) / TOKEN_CACHE_DIR


#: the writer stamp in a temporary file's name: ``PID@HOST`` (a host name's odd characters as ``_``)
_WRITER = re.compile(r"\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9._-]+)\.tmp$")


def _this_host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new ``.NAME.XXXXXXXX.PID@HOST.tmp`` beside ``path`` (its writer in its name, so the next
    attempt tells a killed writer's file from a live one's: :func:`writer_is_dead`), opened for
    writing with mode 0o666 less the umask (``tempfile.mkstemp`` would make it 0600, unreadable by
    the rest of a lab)."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.{os.getpid()}@{_this_host()}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def writer_is_dead(tmp: Path) -> bool:
    """Whether the process that created temporary file ``tmp`` (:func:`_create_temp`) is gone: it
    ran on this host and no process has its pid. False where that cannot be told (another host,
    a name without its writer)."""
    found = _WRITER.search(tmp.name)
    if found is None or found["host"] != _this_host():
        return False
    try:
        os.kill(int(found["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # alive (another user's), or no pid at all
        return False
    return False


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write temp file in the same directory, fsync, rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def disk_full_error(path: Path, needed: int, why: str) -> ProtobenchError:
    """The error for a file that does not fit: names the path, the bytes needed and free."""
    free = shutil.disk_usage(path.parent).free
    return ProtobenchError(
        f"cannot write {str(path)!r}: {why}; it needs {needed:,} bytes (+ {FREE_SPACE_MARGIN:,} kept free) and "
        f"{free:,} bytes are free there. Free space on that filesystem (or raise the quota / file-size "
        "limit), or move the runs directory (--runs-dir), then run again: the run resumes from its last "
        "complete file"
    )


def atomic_write_checked(path: Path, data: bytes) -> None:
    """:func:`atomic_write_bytes` that first checks the filesystem has room for ``data`` (plus
    :data:`FREE_SPACE_MARGIN`) and turns a disk-full, quota or file-size-limit failure of the write
    into a :class:`ProtobenchError`. Either way the old file at ``path`` is left as it was and no
    temporary file remains."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(path.parent).free < len(data) + FREE_SPACE_MARGIN:
        raise disk_full_error(path, len(data), "not enough free disk space")
    try:
        atomic_write_bytes(path, data)
    except OSError as err:
        if err.errno not in DISK_FULL_ERRNOS:
            raise
        raise disk_full_error(path, len(data), f"the write failed ({os.strerror(err.errno)})") from err


def json_bytes(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n").encode()


def atomic_write_json(path: Path, payload: dict[str, Any]) -> None:
    atomic_write_bytes(path, json_bytes(payload))


def check_runs_space(run_dir: Path) -> None:
    """Before a run computes anything: its directory's filesystem has :data:`FREE_SPACE_MARGIN`
    free (the run's files, the checkpoint aside, are far smaller), else the disk-full error."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(run_dir).free < FREE_SPACE_MARGIN:
        raise disk_full_error(run_dir / SPEC_FILE, 0, "not enough free disk space for the run's files")


class UnreadableRunFile(ProtobenchError):
    """A run file that exists but is not a JSON object the suite can read safely."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} is unreadable: {why}; delete it (the run then counts as unfinished) or re-run "
                         "that run")
        self.path, self.why = path, why


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_JSON_INT_DIGITS} are read)")
    return int(text)


def _nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, brackets inside strings ignored (a scan
    without recursion, so a hostile file cannot exhaust the parser's stack)."""
    depth = deepest = 0
    for token in _JSON_STRUCTURE.findall(text):
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def parse_run_json(text: str, path: Path) -> dict[str, Any]:
    """One run file's JSON object, parsed safely: nesting at most :data:`MAX_JSON_DEPTH`, integers
    at most :data:`MAX_JSON_INT_DIGITS` digits, the top level an object; anything else is one
    :class:`UnreadableRunFile` naming the file. (Parsing JSON never executes code.)"""
    if _nesting_depth(text) > MAX_JSON_DEPTH:
        raise UnreadableRunFile(path, f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except ValueError as err:  # json.JSONDecodeError included
        raise UnreadableRunFile(path, f"not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise UnreadableRunFile(path, f"the top level is a {type(data).__name__}, not a JSON object")
    return data


def load_json(path: Path) -> dict[str, Any] | None:
    """A run file's JSON object (:func:`parse_run_json`), None when the file is absent;
    :class:`UnreadableRunFile` when it exists but cannot be read safely."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise UnreadableRunFile(path, str(err)) from None
    return parse_run_json(text, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The parsed file, or None if it is absent or unreadable (:func:`load_json` says why)."""
    try:
        return load_json(path)
    except UnreadableRunFile:
        return None


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def spec_path(self) -> Path:
        return self.path / SPEC_FILE

    @property
    def result_path(self) -> Path:
        return self.path / RESULT_FILE

    @property
    def failure_path(self) -> Path:
        return self.path / FAILURE_FILE

    @property
    def pruned_path(self) -> Path:
        return self.path / PRUNED_FILE

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE

    def remove_stale_temp_files(self) -> list[Path]:
        """Delete the temporary files a killed writer of :data:`LOCKED_FILES` left behind, and
        those of the files a submitting process also writes whose writer is dead
        (:func:`writer_is_dead`) or that are older than :data:`UNLOCKED_TEMP_STALE_S`; call only
        while holding :func:`run_lock` (no live writer of the locked files can own them then)."""
        stale = [tmp for name in LOCKED_FILES for tmp in self.path.glob(f".{name}.*.tmp")]
        stale += self._abandoned(UNLOCKED_FILES)
        for tmp in stale:
            tmp.unlink(missing_ok=True)
        return stale

    def remove_abandoned_temp_files(self) -> list[Path]:
        """Without the lock (a finished run is never re-entered, yet its killed writers' files
        go): delete the temporary files of any run file whose writer is dead or that are older
        than :data:`UNLOCKED_TEMP_STALE_S` (a write takes milliseconds to seconds)."""
        stale = self._abandoned((*LOCKED_FILES, *UNLOCKED_FILES))
        for tmp in stale:
            tmp.unlink(missing_ok=True)
        return stale

    def _abandoned(self, names: Sequence[str]) -> list[Path]:
        now, found = time.time(), []
        for tmp in (tmp for name in names for tmp in self.path.glob(f".{name}.*.tmp")):
            try:
                if writer_is_dead(tmp) or now - tmp.stat().st_mtime > UNLOCKED_TEMP_STALE_S:
                    found.append(tmp)
            except FileNotFoundError:  # its writer renamed it meanwhile
                continue
        return found

    def result(self) -> dict[str, Any] | None:
        return read_json(self.result_path)

    def failure(self) -> dict[str, Any] | None:
        return read_json(self.failure_path)

    def spec(self) -> dict[str, Any] | None:
        return read_json(self.spec_path)

    @property
    def is_complete(self) -> bool:
        return self.result() is not None

    @property
    def state(self) -> str:
        """'done' | 'pruned' (a tuning trial its study stopped early) | 'failed' | 'started' (a
        process began training it: it has a checkpoint, or at least the log its training opens,
        so a run interrupted before its first checkpoint is not shown as never started) | 'new'."""
        if self.is_complete:
            return "done"
        if self.pruned_path.exists():
            return "pruned"
        if self.failure_path.exists():
            return "failed"
        if self.checkpoint_path.exists() or self.log_path.exists():
            return "started"
        return "new"


class RunBusy(Exception):
    """Another live process holds the run's lock; ``holder`` says which (pid, host, since)."""

    def __init__(self, run_dir: Path, holder: str) -> None:
        super().__init__(f"running elsewhere: {holder}" if holder else "running elsewhere")
        self.run_dir, self.holder = run_dir, holder


@contextmanager
def run_lock(run_dir: Path, *, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the run's exclusive lock for the life of an attempt, or raise :class:`RunBusy` when
    another process still holds it after ``wait_s`` seconds (0: at once).

    ``fcntl.flock`` on ``RUN_DIR/.lock``: the kernel drops it when the holder's file is closed,
    also when the process dies (``kill -9``), so a crash never leaves a run locked and a
    requeued SLURM job is never locked out by its dead predecessor. (After a node failure, an
    NFS server frees the dead node's locks only when its lease expires, 90 s by default: the
    reason jobs wait, :data:`slurm.jobs.LOCK_WAIT_S`.) The file is never deleted (unlinking
    it would let two processes lock two different files); it names the holder for the message
    of those it turns away."""
    rd = RunDir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(rd.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    deadline = time.monotonic() + wait_s
    try:
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(1.0)  # poll: a blocking flock could not give up at the deadline
        except BlockingIOError:
            raise RunBusy(run_dir, rd.lock_path.read_text(errors="replace").strip()) from None
        except OSError as err:  # ENOLCK, EOPNOTSUPP: a filesystem mounted without lock support
            raise ProtobenchError(f"cannot lock {rd.lock_path} ({err.strerror}): the runs directory must be on a "
                                  "filesystem with file locks (local disk, NFS with lockd, Lustre mounted "
                                  "with -o flock)") from err
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
                 .encode())  # LOCK_TEXT reads it back
        yield
    finally:
        os.close(fd)  # releases the lock


def lock_holder(run_dir: Path) -> str | None:
    """Who holds the run's lock (:func:`run_lock`), as its lock file names them ("pid P on HOST
    since T"); None when no process does."""
    try:
        fd = os.open(RunDir(run_dir).lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None  # nobody holds it (the shared lock is released at close)
    except BlockingIOError:
        return os.read(fd, 4096).decode(errors="replace").strip() or "another process"
    except OSError:  # a filesystem without locks: nobody can be holding one
        return None
    finally:
        os.close(fd)


def curve_files(paths: Sequence[Path]) -> list[Path]:
    """``metrics.jsonl`` of each run directory given, or of every run below a folder given."""
    files: dict[Path, Path] = {}
    for path in paths:
        if not path.is_dir():
            raise ProtobenchError(f"{path} is not a directory; pass run directories (runs/<grid>/<run_id>).")
        found = [path / METRICS_FILE] if (path / METRICS_FILE).is_file() else sorted(path.rglob(METRICS_FILE))
        if not found:
            raise ProtobenchError(
                f"No {METRICS_FILE} in or below {path}; runs write it once per epoch while they train — "
                f"pass a run directory of a run started with this version, or run it again."
            )
        for file in found:
            files.setdefault(file.resolve(), file)
    return list(files.values())


def find_run_dirs(root: Path) -> list[RunDir]:
    """Every run directory (one holding spec.json) below ``root``, sorted by path."""
    return sorted((RunDir(p.parent) for p in Path(root).rglob(SPEC_FILE)), key=lambda r: str(r.path))
