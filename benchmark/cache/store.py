"""On-disk cache entries: one directory of ``.npy`` arrays + ``manifest.json``, safe without a
cluster-wide lock.

Build: a builder writes into its own folder ``.tmp-<name>-<host>-<pid>-<random>`` (recording its
owner in ``builder.json`` and beating ``heartbeat``), reads it back as a reader will (:mod:`benchmark.cache.entry`),
and publishes it with one ``rename`` onto ``<name>``. A rename never
replaces a non-empty directory, so publishing never destroys an entry: a builder that finds an
entry of its key already published discards its own folder and uses that one; an entry of
another key (or unreadable manifest) is first renamed aside to ``.old-<name>-<epoch>-<random>``.
The build lock (``lock.build_lock``) only spares the duplicate work.

Leftovers are removed only when provably unused: a build folder when its owner is dead
(``lock.is_dead``); an entry moved aside when no reader on this node holds its shared
``flock`` and nobody opened it for ``READER_GRACE_SECONDS`` (``last_used``; readers on nodes
where flock is node-local are covered by that age).

Opening an entry (the checks of every open, the reader's shared ``flock``): :mod:`benchmark.cache.entry`.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from benchmark.cache.arrays import ArraySpec, ArrayWriter
from benchmark.cache.entry import LAST_USED, MANIFEST, SAMPLE_BLOCKS, Entry, _normalised, open_entry, read_manifest
from benchmark.cache.lock import Heartbeat, Owner, build_lock, filesystem_now, is_dead
from benchmark.errors import ProtobenchError
from benchmark.run.store import DISK_FULL_ERRNOS

BUILDER = "builder.json"
HEARTBEAT = "heartbeat"
LOCK_DIR = ".locks"
TMP_PREFIX = ".tmp-"
ASIDE_PREFIX = ".old-"
#: an entry moved aside is kept this long after its last open, for readers on other nodes
READER_GRACE_SECONDS = 24 * 3600.0

Fill = Callable[[dict[str, ArrayWriter]], dict[str, Any]]


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def in_use_here(entry: Path) -> bool:
    """Whether a process on this node holds the entry open (its shared flock on the manifest)."""
    try:  # writable where possible: NFS emulates flock with POSIX locks, exclusive ones need it
        fd = os.open(entry / MANIFEST, os.O_RDWR)
    except OSError:
        try:
            fd = os.open(entry / MANIFEST, os.O_RDONLY)
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def last_used(entry: Path) -> float:
    """When the entry was last opened (or, never opened, written), as a timestamp."""
    for name in (LAST_USED, MANIFEST):
        try:
            return (entry / name).stat().st_mtime
        except OSError:
            continue
    return entry.stat().st_mtime


def aside_time(folder: Path) -> float:
    """When an ``.old-`` folder was moved aside (the epoch second in its name)."""
    try:
        return float(folder.name.rsplit("-", 2)[1])
    except (IndexError, ValueError):
        return 0.0


def move_aside(entry: Path) -> Path | None:
    """Rename ``entry`` out of the way (new opens no longer find it); None if it is already gone."""
    aside = entry.with_name(f"{ASIDE_PREFIX}{entry.name}-{int(time.time())}-{secrets.token_hex(4)}")
    try:
        os.rename(entry, aside)
    except FileNotFoundError:
        return None
    return aside


def aside_removable(folder: Path) -> bool:
    """An entry moved aside may go when no local reader holds it and nobody opened it lately."""
    idle_since = max(last_used(folder), aside_time(folder))
    return not in_use_here(folder) and time.time() - idle_since > READER_GRACE_SECONDS


def build_is_dead(folder: Path, now: float) -> bool:
    return is_dead(Owner.read(folder / BUILDER), folder / HEARTBEAT, now)


def remove_leftovers(cache_dir: Path, name: str = "") -> list[Path]:
    """Remove dead builders' folders and idle entries moved aside (of entry ``name``, or all)."""
    removed = []
    now = filesystem_now(cache_dir)
    for folder in sorted(cache_dir.glob(f"{TMP_PREFIX}{name}*")):
        if folder.is_dir() and build_is_dead(folder, now):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    for folder in sorted(cache_dir.glob(f"{ASIDE_PREFIX}{name}*")):
        if folder.is_dir() and aside_removable(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_free_space(directory: Path, needed: int, what: str) -> None:
    """``ProtobenchError`` naming ``directory``, the bytes needed and the bytes free when ``what``
    (``needed`` bytes) does not fit there. A directory not created yet is measured at its
    nearest existing parent (the filesystem it will be on)."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = _free_bytes(existing)
    if free < needed:
        raise ProtobenchError(
            f"Not enough space for {what} in {directory}: it needs {_size(needed)} ({needed} bytes), "
            f"{_size(free)} ({free} bytes) are free. Free space, remove unused entries "
            f"(`protobench cache rm --unused`) or set --cache-dir to a larger filesystem."
        )


def _check_space(folder: Path, needed: int) -> None:
    check_free_space(folder.parent, needed, "building the token-cache entry")


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Inside a private build folder: published with the folder, so a plain write + fsync suffices."""
    with open(folder / MANIFEST, "w") as file:
        file.write(json.dumps(manifest, indent=2, sort_keys=True))
        file.flush()
        os.fsync(file.fileno())


def _new_build_folder(cache_dir: Path, name: str, owner: Owner) -> Path:
    # mkdir (not mkdtemp, which makes 0700): the folder follows the umask, as the published entry must
    folder = cache_dir / f"{TMP_PREFIX}{name}-{owner.host}-{owner.pid}-{secrets.token_hex(4)}"
    folder.mkdir()
    owner.write(folder / BUILDER)
    (folder / HEARTBEAT).touch()
    return folder


def _write_arrays(folder: Path, layout: Mapping[str, ArraySpec], fill: Fill) -> tuple[dict[str, Any], dict[str, Any]]:
    writers: dict[str, ArrayWriter] = {}
    try:
        for array, spec in layout.items():
            writers[array] = ArrayWriter(folder / f"{array}.npy", spec)
        body = fill(writers)
        return body, {array: writer.close() for array, writer in writers.items()}
    finally:
        for writer in writers.values():
            writer.abort()


def _rename_unless_taken(source: Path, target: Path) -> bool:
    """``os.rename(source, target)``; False when ``target`` is a non-empty folder already."""
    try:
        os.rename(source, target)
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        return False
    return True


def _publish(folder: Path, final: Path, key: Mapping[str, Any]) -> Entry | None:
    """Rename ``folder`` onto ``final``: None when published, else the entry of ``key`` found there."""
    for _ in range(8):
        if _rename_unless_taken(folder, final):
            _fsync(final.parent)
            return None
        existing = open_entry(final, key)
        if existing is not None:  # another builder published the same key first: keep theirs
            return existing
        aside = move_aside(final)  # another key, format or an unreadable manifest: keep it aside, never delete
        moved = read_manifest(aside) if aside is not None else None
        if isinstance(moved, dict) and moved.get("key") == _normalised(key):
            # a builder without the lock published the same key between the check and the move:
            # put theirs back (unless a third one took the place), and take it on the next round
            _rename_unless_taken(aside, final)  # type: ignore[arg-type]
    raise ProtobenchError(f"Could not publish the token-cache entry {final}: it keeps being replaced.")


def open_or_build(
    cache_dir: Path,
    name: str,
    key: Mapping[str, Any],
    layout: Mapping[str, ArraySpec],
    fill: Fill,
    *,
    expect: Mapping[str, Any] | None = None,
) -> tuple[Entry, bool]:
    """The entry ``cache_dir/name`` of ``key``, and whether this call built it.

    ``fill(writers)`` writes the rows of every array of ``layout`` through its writer, in order,
    and returns the rest of the manifest; checksums, the key, the builder and the creation time
    are added here. ``expect``: array records (``"blocks"``) the written arrays must reproduce
    (a verified copy). On any failure the build folder is removed.
    """
    final = cache_dir / name
    entry = open_entry(final, key)
    if entry is not None:
        return entry, False
    cache_dir.mkdir(parents=True, exist_ok=True)
    owner = Owner.current()
    with Heartbeat() as heartbeat, build_lock(cache_dir / LOCK_DIR / f"{name}.lock", heartbeat):
        entry = open_entry(final, key)
        if entry is not None:  # built by another process while this one waited for the lock
            return entry, False
        remove_leftovers(cache_dir, name)
        folder = _new_build_folder(cache_dir, name, owner)
        heartbeat.add(folder / HEARTBEAT)
        needed = sum(spec.file_bytes for spec in layout.values())
        try:
            _check_space(folder, needed)
            body, arrays = _write_arrays(folder, layout, fill)
            _check_copy(final, arrays, expect)
            manifest = {
                **body,
                "arrays": arrays,
                "key": _normalised(key),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "built_by": {"host": owner.host, "pid": owner.pid, "user": _user()},
            }
            _write_manifest(folder, manifest)
            _verify_built(folder, key)
            existing = _publish(folder, final, key)
        except OSError as error:
            if error.errno not in DISK_FULL_ERRNOS:
                raise
            raise ProtobenchError(
                f"The disk filled while building the token-cache entry {final} ({error.strerror}): it needs "
                f"{_size(needed)} ({needed} bytes), {_size(_free_bytes(cache_dir))} are free now. Nothing was "
                f"kept; free space or set --cache-dir to a larger filesystem."
            ) from None
        finally:
            heartbeat.discard(folder / HEARTBEAT)
            shutil.rmtree(folder, ignore_errors=True)  # gone after a publish; a failure's leftovers otherwise
    if existing is not None:
        return existing, False
    entry = open_entry(final, key)
    if entry is None:
        raise ProtobenchError(f"The token-cache entry {final} vanished right after it was published.")
    return entry, True


def _verify_built(folder: Path, key: Mapping[str, Any]) -> None:
    """Before publishing, read the build back as a reader will (headers, sizes, sampled blocks).
    Not every block: right after writing, the page cache, not the disk, would answer."""
    try:
        open_entry(folder, key, sample=SAMPLE_BLOCKS, record_use=False)
    except ProtobenchError as error:
        raise ProtobenchError(f"The token-cache entry built in {folder} reads back wrong: {error}") from None


def _check_copy(final: Path, arrays: Mapping[str, Any], expect: Mapping[str, Any] | None) -> None:
    for array, meta in (expect or {}).items():
        if arrays[array]["blocks"] != meta["blocks"]:
            raise ProtobenchError(
                f"The copy {final} of {array}.npy differs from its source's checksums: the source entry is corrupt "
                f"or changed while it was copied; check it with `protobench cache verify`."
            )


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())


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

