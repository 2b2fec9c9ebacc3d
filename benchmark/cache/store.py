"""Crash- and race-safe on-disk cache entries: one directory of ``.npy`` arrays + ``manifest.json``.

An entry is built at most once: the builder holds an exclusive ``fcntl.flock`` on a per-entry
lock file, writes into a temporary directory inside the cache directory and publishes it with
one ``os.rename``, so a reader sees a complete entry or none. A second builder blocks on the
lock, then finds the entry. An entry whose manifest disagrees with the requested key (or whose
arrays do not match their manifest) is rebuilt. Arrays are read memory-mapped.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.errors import ProtobenchError

MANIFEST = "manifest.json"
LOCK_DIR = ".locks"
TMP_PREFIX = ".tmp-"


def _normalised(key: Mapping[str, Any]) -> dict[str, Any]:
    """The key as it reads back from JSON (tuples → lists), for comparison with a manifest's."""
    return json.loads(json.dumps(dict(key), sort_keys=True))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(entry: Path) -> dict[str, Any] | None:
    """The parsed manifest of ``entry``, or None when it is missing or unreadable."""
    try:
        return json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def open_arrays(entry: Path, manifest: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every array the manifest lists, memory-mapped read-only."""
    return {name: np.load(entry / f"{name}.npy", mmap_mode="r") for name in manifest["arrays"]}


def _complete(entry: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The manifest of ``entry`` if it holds ``key`` and every listed array with its shape and dtype."""
    manifest = read_manifest(entry)
    if manifest is None or manifest.get("key") != _normalised(key):
        return None
    try:
        arrays = open_arrays(entry, manifest)
    except (OSError, ValueError, KeyError):
        return None
    for name, array in arrays.items():
        meta = manifest["arrays"][name]
        if list(array.shape) != meta["shape"] or str(array.dtype) != meta["dtype"]:
            return None
    return manifest


@contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks while another process builds this entry
        except OSError as error:
            raise ProtobenchError(
                f"The cache directory {path.parent.parent} does not support file locks ({error.strerror}); "
                f"set cache_dir to a local or lock-capable filesystem."
            ) from error
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def open_or_build(
    cache_dir: Path, name: str, key: Mapping[str, Any], build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict[str, Any], bool]:
    """The entry ``cache_dir/name`` for ``key``: (path, manifest, whether this call built it).

    ``build(tmp_dir)`` writes ``<array>.npy`` files into ``tmp_dir`` and returns the manifest
    body, whose ``"arrays"`` maps each array name to ``{"shape": [...], "dtype": "..."}``; the
    key and the creation time are added here. If ``build`` raises, nothing is left behind.
    """
    final = cache_dir / name
    manifest = _complete(final, key)
    if manifest is not None:
        return final, manifest, False
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(cache_dir / LOCK_DIR / f"{name}.lock"):
        manifest = _complete(final, key)
        if manifest is not None:  # another process built it while this one waited for the lock
            return final, manifest, False
        # leftovers of a builder that was killed (SIGKILL, node failure): nobody else holds the lock
        for stale in cache_dir.glob(f"{TMP_PREFIX}{name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=cache_dir))
        try:
            manifest = build(tmp)
            manifest["key"] = _normalised(key)
            manifest["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            for array in manifest["arrays"]:
                _fsync(tmp / f"{array}.npy")
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
            _fsync(tmp / MANIFEST)
            if final.exists():  # an entry of another key or format under this name: replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync(cache_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final, manifest, True


def list_manifests(cache_dir: Path) -> list[dict[str, Any]]:
    """Manifests of the published entries under ``cache_dir`` (each with its ``"path"``), by name."""
    if not cache_dir.is_dir():
        return []
    found = []
    for entry in sorted(cache_dir.iterdir()):
        manifest = None if entry.name.startswith(".") else read_manifest(entry)
        if manifest is not None:
            found.append({**manifest, "path": str(entry)})
    return found
