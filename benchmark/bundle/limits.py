"""What a bundle from another lab may hold, for every reader of one (``leaderboard``, ``bundle
pull``): bounded numbers and sizes of files, relative paths that stay inside it, and one error
type for a source that breaks these rules."""
from __future__ import annotations

from dataclasses import dataclass
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


@dataclass
class Tally:
    """The files of one source counted against the bounds as they are met: :meth:`add` refuses the
    file that crosses one (before it is read or written)."""

    given: str
    count: int = 0
    total: int = 0

    def add(self, size: int) -> None:
        self.count += 1
        self.total += size
        if self.count > MAX_FILES or size > MAX_FILE_BYTES or self.total > MAX_TOTAL_BYTES:
            raise UnsafeSource(f"source {self.given} exceeds a leaderboard's bounds ({self.count} file(s) so far, one "
                               f"of {size} bytes, {self.total} bytes in all; at most {MAX_FILES} files, "
                               f"{MAX_FILE_BYTES} bytes per file, {MAX_TOTAL_BYTES} in all): it is refused")
