"""A bundle archive (``.tar.gz``, ``.tgz``, ``.tar``) unpacked within a budget, the manifest first.

An archive is untrusted: a few megabytes of gzip can inflate to gigabytes. So it is read twice:

1. **Headers and manifest, nothing written.** Every member is checked as it is met (a regular
   file or a folder, a relative path without ``..`` inside one top folder, the bounds of
   benchmark/bundle/limits.py), and its *declared* size is counted against the budget before the
   reader moves past it: the first member that would take the archive over the budget stops the
   reading (its data is never inflated). The manifest, ``SHA256SUMS``, is read into memory.
2. **Only listed members, written.** A member ``SHA256SUMS`` does not list stops everything
   before the first byte is written (a bundle archive lists every file), as does an archive
   without a manifest. The space needed, the declared sizes' sum, is checked against the free
   space of the temporary folder; then each member is written, checked against its declared
   size as it is copied. A full disk names the temporary folder and the space needed.

The **budget** of one archive: :data:`UNPACK_RATIO` times the archive's own size, at least
:data:`UNPACK_FLOOR`, as decompression-bomb guards bound the inflation ratio (Apache POI's
``ZipSecureFile`` refuses entries that inflate more than 100-fold: its minimum inflate ratio
0.01); ``leaderboard --unpack-budget-mib N`` sets another. A bundle's own files (JSON, Parquet and
gzip-compressed CSV records) inflate a few-fold at most.
"""
from __future__ import annotations

import errno
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from benchmark.bundle.limits import Tally, UnsafeSource, member_path
from benchmark.bundle.manifest import MANIFEST_FILE, parse_manifest
from benchmark.errors import ProtobenchError

UNPACK_RATIO = 100
UNPACK_FLOOR = 256 << 20
_CHUNK = 1 << 20


def unpack_budget(archive_bytes: int, budget: int | None = None) -> int:
    """The bytes an archive of ``archive_bytes`` may unpack to (``budget``: the caller's own)."""
    return budget if budget is not None else max(UNPACK_FLOOR, UNPACK_RATIO * archive_bytes)


@dataclass(frozen=True)
class Planned:
    """What the first reading found: the top folder, the regular members, the bytes they declare."""

    top: str
    members: tuple[tarfile.TarInfo, ...]
    declared: int


def _budget_text(budget: int, archive_bytes: int, given: bool) -> str:
    how = ("set with --unpack-budget-mib" if given else
           f"{UNPACK_RATIO} × the archive's {archive_bytes} bytes, at least {UNPACK_FLOOR >> 20} MiB; "
           "--unpack-budget-mib N raises it")
    return f"its budget of {budget} bytes ({how})"


def _plan(tar: tarfile.TarFile, archive: Path, budget: int, given: bool) -> Planned:
    """Step 1 of the module: headers checked, declared sizes against the budget, manifest read."""
    size = archive.stat().st_size
    regular: list[tarfile.TarInfo] = []
    tops: set[str] = set()
    tally, declared = Tally(str(archive)), 0
    manifest_bytes: bytes | None = None
    for member in tar:
        path = member_path(member.name)
        if path is None:
            raise UnsafeSource(f"archive {archive} has an unsafe member {member.name!r} (an absolute path or one "
                               "with ..); it is refused and nothing was unpacked")
        tops.add(path.parts[0])
        if member.isdir():
            tally.add(0)  # every member counts towards the bound on files, folders too
            continue
        if not member.isreg():
            raise UnsafeSource(f"archive {archive} has member {member.name!r} that is a link or a special file; a "
                               "bundle holds regular files only: it is refused and nothing was unpacked")
        if declared + member.size > budget:
            raise UnsafeSource(f"archive {archive}: member {member.name!r} declares {member.size} bytes, which with "
                               f"the {declared} bytes before it exceeds {_budget_text(budget, size, given)}; it is "
                               "refused and nothing was unpacked")
        tally.add(member.size)  # the bounds on files and on one file's size
        declared += member.size
        if len(path.parts) == 2 and path.parts[1] == MANIFEST_FILE:
            handle = tar.extractfile(member)
            manifest_bytes = handle.read() if handle is not None else b""  # parsed once every header passed
        regular.append(member)
    if len(tops) != 1:
        raise ProtobenchError(f"archive {archive} holds {len(tops)} top folder(s); a bundle archive holds one (as "
                              "`protobench bundle` writes it)")
    top = tops.pop()
    if manifest_bytes is None:
        raise ProtobenchError(f"archive {archive} has no {MANIFEST_FILE} in its top folder, so none of its files "
                              "can be checked: it is refused and nothing was unpacked (a bundle archive as "
                              "`protobench bundle` writes it lists every file there)")
    manifest = parse_manifest(manifest_bytes, f"{archive}: {top}/{MANIFEST_FILE}")
    for member in regular:
        inside = PurePosixPath(*member_path(member.name).parts[1:]).as_posix()  # type: ignore[union-attr]
        if inside != MANIFEST_FILE and inside not in manifest:
            raise UnsafeSource(f"archive {archive}: member {member.name!r} is not listed in its {MANIFEST_FILE}; a "
                               "bundle lists every file it holds: it is refused and nothing was unpacked")
    return Planned(top, tuple(regular), declared)


def _full(workdir: Path, needed: int) -> ProtobenchError:
    return ProtobenchError(f"the temporary folder {workdir.parent} has no room to unpack the archive: it needs "
                           f"{needed} bytes ({needed / 2**20:.1f} MiB); free space there or point TMPDIR at a "
                           "folder with more")


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, archive: Path) -> None:
    source = tar.extractfile(member)
    if source is None:
        raise UnsafeSource(f"archive {archive}: member {member.name!r} cannot be read as a file")
    written = 0
    try:
        with source, target.open("xb") as out:  # "x": a repeated member never overwrites
            while chunk := source.read(_CHUNK):
                written += len(chunk)
                if written > member.size:  # tarfile reads the declared size; a guard all the same
                    raise UnsafeSource(f"archive {archive}: member {member.name!r} holds more than the {member.size} "
                                       "bytes it declares; it is refused")
                out.write(chunk)
    except FileExistsError:
        raise UnsafeSource(f"archive {archive} holds {member.name!r} twice; it is refused") from None


def unpack_archive(archive: Path, workdir: Path, *, budget: int | None = None) -> Path:
    """The bundle folder of ``archive`` unpacked under ``workdir`` (new) within the budget (see the
    module: ``budget`` in bytes, None for the default); the folder is returned."""
    limit = unpack_budget(archive.stat().st_size, budget)
    planned: Planned | None = None
    try:
        with tarfile.open(archive, "r:*") as tar:
            planned = _plan(tar, archive, limit, budget is not None)
        workdir.parent.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(workdir.parent).free < planned.declared:
            raise _full(workdir, planned.declared)
        workdir.mkdir()
        with tarfile.open(archive, "r:*") as tar:
            for member in planned.members:
                target = workdir / member_path(member.name)  # type: ignore[operator]
                target.parent.mkdir(parents=True, exist_ok=True)
                _write(tar, member, target, archive)
    except OSError as err:
        if err.errno == errno.ENOSPC and planned is not None:
            raise _full(workdir, planned.declared) from None
        raise ProtobenchError(f"archive {archive} cannot be read ({err}); give a bundle archive as `protobench "
                              "bundle` writes it") from None
    except (tarfile.TarError, EOFError) as err:
        raise ProtobenchError(f"archive {archive} cannot be read ({err}); give a bundle archive as `protobench "
                              "bundle` writes it") from None
    return workdir / planned.top
