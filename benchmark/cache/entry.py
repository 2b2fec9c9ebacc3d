"""A published token-cache entry and how it is opened: its files (``manifest.json`` and ``.npy``
arrays), the checks of every open (headers, sizes, row-block checksums: all blocks the first time
this process opens it, ``SAMPLE_BLOCKS`` random ones later) and the shared ``flock`` a reader
holds while it is open. Building, publishing and removing entries: :mod:`benchmark.cache.store`.
"""
from __future__ import annotations

import fcntl
import json
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.cache.arrays import CorruptArray, bad_blocks, open_array, sample_blocks
from benchmark.errors import ProtobenchError

MANIFEST = "manifest.json"
LAST_USED = "last_used"
#: random row blocks hashed per array when an entry is opened (plus its first and last block)
SAMPLE_BLOCKS = 6
#: entries whose every block this process hashed (:func:`_identity`); later opens only sample
_VERIFIED_HERE: set[tuple[object, ...]] = set()
#: arrays hashed in full at every open (small, and read whole anyway)
FULLY_CHECKED = ("labels",)


def _normalised(key: Mapping[str, Any]) -> dict[str, Any]:
    """The key as it reads back from JSON (tuples → lists), for comparison with a manifest's."""
    return json.loads(json.dumps(dict(key), sort_keys=True))


def rm_command(entry: Path) -> str:
    return f"protobench cache rm {entry.name} --cache-dir {entry.parent}"


def corrupt_error(entry: Path, reason: str) -> ProtobenchError:
    return ProtobenchError(
        f"The token-cache entry {entry} is corrupt: {reason}. Remove it with `{rm_command(entry)}` "
        f"and run again (it is rebuilt)."
    )


def read_manifest(entry: Path) -> dict[str, Any] | None:
    """The parsed manifest of ``entry``, or None when it is missing or unreadable."""
    try:
        return json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


@dataclass
class Entry:
    """A published entry, open: its manifest and its arrays memory-mapped read-only. While it is
    open the process holds a shared ``flock`` on its manifest (released when it is collected)."""

    path: Path
    manifest: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(repr=False)
    reader_fd: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.reader_fd is not None:
            weakref.finalize(self, os.close, self.reader_fd)


def _read_json_at(name: str, dir_fd: int) -> Any:
    with open(name, "rb", opener=lambda path, flags: os.open(path, flags, dir_fd=dir_fd)) as file:
        return json.loads(file.read())


def _hold_shared(dir_fd: int) -> int | None:
    """A shared flock on the manifest, held by the returned descriptor (None where unsupported)."""
    fd = os.open(MANIFEST, os.O_RDONLY, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # only in_use_here's probe takes it exclusively, for an instant
    except OSError:
        os.close(fd)  # no locks on this filesystem: the reader grace age alone protects it
        return None
    return fd


def _touch_last_used(dir_fd: int) -> None:
    try:
        os.close(os.open(LAST_USED, os.O_WRONLY | os.O_CREAT, 0o666, dir_fd=dir_fd))
        os.utime(LAST_USED, dir_fd=dir_fd)
    except OSError:
        pass  # a read-only entry (another user's): last use is then not recorded


def open_entry(
    path: Path, key: Mapping[str, Any], *, sample: int | None = None, record_use: bool = True
) -> Entry | None:
    """The entry at ``path`` if it holds ``key``, checked (sizes, headers, checksums); None when
    there is no entry of ``key`` there; ``ProtobenchError`` when it is corrupt.
    ``sample``: random blocks hashed per array; default: every block the first time this
    process opens the entry (a run never uses a block unverified), ``SAMPLE_BLOCKS`` on later
    opens of the same, unchanged entry. ``record_use``: touch ``last_used`` (not for verification)."""
    try:
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        try:
            manifest = _read_json_at(MANIFEST, dir_fd)
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or manifest.get("key") != _normalised(key):
            return None
        try:
            arrays = {name: open_array(name, meta, dir_fd) for name, meta in manifest["arrays"].items()}
            identity = _identity(dir_fd, manifest)
            every = sample is None and identity not in _VERIFIED_HERE
            for name, array in arrays.items():
                meta = manifest["arrays"][name]
                count = len(meta["blocks"])
                fully = every or name in FULLY_CHECKED
                blocks = range(count) if fully else sample_blocks(count, SAMPLE_BLOCKS if sample is None else sample)
                bad = bad_blocks(array, meta, blocks)
                if bad:
                    raise CorruptArray(f"{name}.npy: row block {bad[0]} does not match its checksum")
        except (CorruptArray, KeyError, TypeError, ValueError) as error:
            raise corrupt_error(path, str(error)) from None
        if every:
            _VERIFIED_HERE.add(identity)
        reader_fd = _hold_shared(dir_fd)
        if record_use:
            _touch_last_used(dir_fd)
        return Entry(path, manifest, arrays, reader_fd)
    finally:
        os.close(dir_fd)


def _identity(dir_fd: int, manifest: dict[str, Any]) -> tuple[object, ...]:
    """An entry folder (device, inode) with each array's checksum, inode and modification time:
    what this process verified (a write to an array after that changes it)."""
    info = os.fstat(dir_fd)
    files = [os.stat(f"{name}.npy", dir_fd=dir_fd) for name in manifest["arrays"]]
    return (info.st_dev, info.st_ino, *((str(meta["checksum"]), f.st_ino, f.st_mtime_ns)
                                        for meta, f in zip(manifest["arrays"].values(), files)))


def verify_entry(path: Path) -> list[str]:
    """Every problem of the entry at ``path`` with every block of every array rehashed ([] = intact)."""
    manifest = read_manifest(path)
    if manifest is None:
        return [f"{MANIFEST} is missing or unreadable"]
    try:
        entry = open_entry(path, manifest.get("key", {}), sample=0, record_use=False)
    except ProtobenchError as error:
        return [str(error)]
    assert entry is not None
    problems = []
    for name, array in entry.arrays.items():
        meta = manifest["arrays"][name]
        bad = bad_blocks(array, meta, range(len(meta["blocks"])))
        if bad:
            problems.append(f"{name}.npy: {len(bad)} of {len(meta['blocks'])} row blocks differ from their checksums")
    return problems
