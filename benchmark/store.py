"""The results store: one directory per run, files written atomically.

``runs/<grid>/<run_id>/{spec.json, checkpoint.pt, result.json, log.txt, metrics.jsonl, failure.json}``.
A run is complete iff ``result.json`` exists and parses (architecture.md, rules of thumb).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPEC_FILE = "spec.json"
RESULT_FILE = "result.json"
FAILURE_FILE = "failure.json"
CHECKPOINT_FILE = "checkpoint.pt"
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"  # one JSON object per trained epoch (benchmark.epochlog)
TOKEN_CACHE_DIR = ".token-cache"  # under the runs directory, beside the grid folders


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
