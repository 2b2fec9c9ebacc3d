"""The results store: one directory per run, files written atomically.

``runs/<grid>/<run_id>/{spec.json, checkpoint.pt, result.json, log.txt, metrics.jsonl, failure.json}``.
A run is complete iff ``result.json`` exists and parses (architecture.md, rules of thumb).
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.errors import ProtobenchError

SPEC_FILE = "spec.json"
RESULT_FILE = "result.json"
FAILURE_FILE = "failure.json"
CHECKPOINT_FILE = "checkpoint.pt"
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"  # one JSON object per trained epoch (benchmark.epochlog)
TOKEN_CACHE_DIR = ".token-cache"  # under the runs directory, beside the grid folders
FREE_SPACE_MARGIN = 64 * 2**20  # bytes left free beyond a file we write: logs, result.json, other writers
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})  # no space, quota, file-size limit


def default_cache_root(runs_root: Path) -> Path:
    """Where the token cache of a runs directory lives unless ``--cache-dir`` says otherwise."""
    return Path(runs_root) / TOKEN_CACHE_DIR


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write temp file in the same directory, fsync, rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def atomic_write_json(path: Path, payload: dict[str, Any]) -> None:
    atomic_write_bytes(path, (json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(path: Path) -> dict[str, Any] | None:
    """The parsed file, or None if it is absent or not valid JSON."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
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
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

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
        """'done' | 'failed' | 'started' (has a checkpoint) | 'new'."""
        if self.is_complete:
            return "done"
        if self.failure_path.exists():
            return "failed"
        if self.checkpoint_path.exists():
            return "started"
        return "new"


def find_run_dirs(root: Path) -> list[RunDir]:
    """Every run directory (one holding spec.json) below ``root``, sorted by path."""
    return sorted((RunDir(p.parent) for p in Path(root).rglob(SPEC_FILE)), key=lambda r: str(r.path))
