"""What a bundle from another lab may hold, for every reader of one (``leaderboard``, ``bundle
pull``): bounded numbers and sizes of files, relative paths that stay inside it, and one error
type for a source that breaks these rules."""
from __future__ import annotations

from pathlib import PurePosixPath

from benchmark.errors import ProtobenchError

MAX_FILES = 200_000  # files in one source
MAX_FILE_BYTES = 1 << 30  # one file (a run's per-image records on CUB are about 1 MB)
MAX_TOTAL_BYTES = 16 << 30  # one source, unpacked
#: files the Hub adds to every repository, and huggingface_hub's own folder in a local download:
#: never part of a bundle, left out when a Hub snapshot is copied
HUB_LOCAL = (".gitattributes", ".cache")


class UnsafeSource(ProtobenchError):
    """A source that would write or read outside its folder, or exceeds the bounds."""


def member_path(name: str) -> PurePosixPath | None:
    """An archive member's or Hub file's relative path, or None when it is absolute or climbs
    out (``..``)."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name or not path.parts:
        return None
    return path


def too_big(given: str, count: int, size: int, total: int) -> UnsafeSource:
    return UnsafeSource(f"source {given} exceeds a leaderboard's bounds ({count} file(s) so far, one of {size} bytes, "
                        f"{total} bytes in all; at most {MAX_FILES} files, {MAX_FILE_BYTES} bytes per file, "
                        f"{MAX_TOTAL_BYTES} in all): it is refused")


def within_bounds(count: int, size: int, total: int) -> bool:
    return count <= MAX_FILES and size <= MAX_FILE_BYTES and total <= MAX_TOTAL_BYTES
