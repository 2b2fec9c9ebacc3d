"""The sources a leaderboard reads, each made a local folder before any of it is read: a bundle
folder, a bundle archive (``.tar.gz``, ``.tgz``, ``.tar``), a bundle on the Hugging Face Hub
(``hf:ORG/NAME[@REVISION]``), or a runs folder (a lab's own runs, no manifest).

A source from another lab is untrusted data:

- every bundle is checked against its ``SHA256SUMS`` (benchmark/bundle/manifest.py); one that fails
  is refused by name unless the caller allows unverified sources, which are then marked; a folder
  that holds bundles is refused naming them (read as one runs folder, they would go unverified);
- an archive member or Hub file that is a link, a device, an absolute path or a path with ``..``
  is refused before anything is written; an archive is unpacked by benchmark/bundle/archive.py
  (never ``extractall``), its manifest first, only the members it lists, within a budget tied to
  the archive's size, into a folder of the caller's;
- the number of files and their sizes are bounded (benchmark/bundle/limits.py), so a crafted
  source cannot fill the disk or the memory;
- nothing in a source is executed or imported: results are JSON, records Parquet or CSV.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmark.bundle.archive import unpack_archive
from benchmark.bundle.format import BUNDLE_FILE, bundle_version
from benchmark.bundle.limits import Tally, UnsafeSource
from benchmark.bundle.manifest import MANIFEST_FILE, sha256_of, verify_bundle
from benchmark.bundle.pull import hub_bundle
from benchmark.errors import ProtobenchError, nearest_sibling
from benchmark.run.store import SCORED_FILES

HUB_PREFIX = "hf:"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")

VERIFIED = "verified"
RUNS_FOLDER = "runs folder: no manifest to verify"


@dataclass(frozen=True)
class Source:
    """One SOURCE as read: ``name`` (how outputs name it), ``root`` (a local folder), ``checksum``
    (SHA-256 of the archive, else of the bundle's SHA256SUMS; None for a runs folder) and
    ``verification`` (:data:`VERIFIED`, :data:`RUNS_FOLDER`, or ``UNVERIFIED: why``)."""

    given: str
    name: str
    kind: str  # "bundle", "archive", "hub" or "runs"
    root: Path
    checksum: str | None
    verification: str
    #: (run, why) of each run that could not be read whole (reports/leaderboard/reading.py): a
    #: verified source with one is refused unless --allow-unverified, which lists it marked
    unreadable: tuple[tuple[str, str], ...] = ()

    @property
    def verified(self) -> bool:
        return self.verification == VERIFIED


def open_sources(given: Sequence[str], workdir: Path, *, allow_unverified: bool = False,
                 unpack_budget: int | None = None) -> list[Source]:
    """Every SOURCE as a local, checked folder (archives and Hub bundles unpacked under
    ``workdir``; ``unpack_budget``: bytes one archive may unpack to, None for the default of
    benchmark/bundle/archive.py); one error, naming the source, for the first that cannot be
    read or fails verification (unless ``allow_unverified``)."""
    if not given:
        raise ProtobenchError("give at least one SOURCE: a bundle folder or archive, a runs folder, or hf:ORG/NAME")
    sources = [open_source(text, workdir / f"source-{i}", allow_unverified=allow_unverified,
                           unpack_budget=unpack_budget) for i, text in enumerate(given)]
    names = [s.name for s in sources]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ProtobenchError(f"two sources are named {repeated[0]!r} ({', '.join(s.given for s in sources if s.name == repeated[0])}); "
                              "a leaderboard names each row's source: rename one folder or archive")
    return sources


def open_source(text: str, workdir: Path, *, allow_unverified: bool = False, unpack_budget: int | None = None) -> Source:
    if text.startswith(HUB_PREFIX):
        repo, _, revision = text.removeprefix(HUB_PREFIX).partition("@")
        root, commit = hub_bundle(repo, revision or None, workdir)
        return _bundle(text, f"{HUB_PREFIX}{repo}@{commit}", "hub", root, allow_unverified)
    path = Path(text)
    if path.is_symlink():
        raise UnsafeSource(f"source {text} is a symbolic link; give the folder or archive it points to")
    if path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES):
        root = unpack_archive(path, workdir, budget=unpack_budget)
        return _bundle(text, path.name, "archive", root, allow_unverified, checksum=sha256_of(path))
    if path.is_dir():
        if (path / MANIFEST_FILE).exists() or (path / BUNDLE_FILE).exists():  # without SHA256SUMS: unverified
            return _bundle(text, path.name, "bundle", path, allow_unverified)
        if any(True for _ in _read_files(path)):
            _refuse_bundles_inside(text, path)
            check_runs_folder(path)
            return Source(text, path.name, "runs", path, None, RUNS_FOLDER)
    if not path.exists():
        raise ProtobenchError(f"source {text} does not exist{nearest_sibling(path)}; give a bundle folder, its "
                              f"{'/'.join(ARCHIVE_SUFFIXES)} archive, a runs folder or {HUB_PREFIX}ORG/NAME")
    raise ProtobenchError(f"source {text} is neither a bundle (a folder with {MANIFEST_FILE}, or its "
                          f"{'/'.join(ARCHIVE_SUFFIXES)} archive), a runs folder (holding result.json files) nor "
                          f"{HUB_PREFIX}ORG/NAME; give one of those")


def _refuse_bundles_inside(given: str, root: Path) -> None:
    """A folder without a manifest of its own that holds bundles (a folder with ``SHA256SUMS`` or
    ``bundle.json``) is no runs folder: read as one, its bundles would go unverified. One error
    naming them (relative to ``root``), before anything is read."""
    inside = sorted({path.parent.relative_to(root).as_posix() for path in _all_entries(root)
                     if path.name in (MANIFEST_FILE, BUNDLE_FILE) and not path.is_symlink()})
    if inside:
        shown = ", ".join(inside[:5]) + (f" and {len(inside) - 5} more" if len(inside) > 5 else "")
        listed = " ".join(str(Path(given) / name) for name in inside[:3])
        raise ProtobenchError(f"source {given} is a folder that holds {len(inside)} bundle(s) ({shown}), not a "
                              "bundle or a runs folder; reading it as one runs folder would leave those bundles "
                              f"unverified: give each bundle as its own SOURCE (protobench leaderboard {listed}"
                              f"{' ...' if len(inside) > 3 else ''} --out DIR)")


def _bundle(given: str, name: str, kind: str, root: Path, allow_unverified: bool, *,
            checksum: str | None = None) -> Source:
    links = _bounded_links(root, given)
    bundle_version(root)  # a newer layout is refused before anything of it is read
    try:
        found = verify_bundle(root)
        problem = None if found.ok else (f"{len(found.links)} link(s), {len(found.changed)} changed, "
                                         f"{len(found.missing)} missing, {len(found.unlisted)} unlisted file(s)"
                                         f" (first: {(found.links + found.changed + found.missing + found.unlisted)[0]})")
    except ProtobenchError as err:  # no readable manifest
        problem = str(err)
    if problem is not None and not allow_unverified:
        raise ProtobenchError(f"bundle {given} FAILED verification against its {MANIFEST_FILE}: {problem}; it is "
                              "refused (ask its lab for it again, or pass --allow-unverified to list its rows "
                              "marked as unverified)")
    if (root / MANIFEST_FILE).is_file() and not (root / MANIFEST_FILE).is_symlink():
        checksum = checksum or sha256_of(root / MANIFEST_FILE)
    if links:  # even an unverified bundle is never read through a link
        raise UnsafeSource(f"bundle {given} holds a symbolic link ({links[0].relative_to(root)}); a bundle holds "
                           "none and a leaderboard reads none: it is refused")
    return Source(given, name, kind, root, checksum, VERIFIED if problem is None else f"UNVERIFIED: {problem}")


def _all_entries(root: Path):
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            yield Path(folder) / name


def _bounded_links(root: Path, given: str) -> list[Path]:
    """One walk of a bundle: its files within the bounds (:class:`Tally`), and its symbolic links."""
    tally, links = Tally(given), []
    for path in _all_entries(root):
        if path.is_symlink():
            links.append(path)
        elif path.is_file():
            tally.add(path.stat().st_size)
    return links


def _read_files(root: Path):
    for path in _all_entries(root):
        if path.name in SCORED_FILES:
            yield path


def check_runs_folder(root: Path) -> None:
    """A runs folder: the files a leaderboard reads are regular files within the bounds (a link
    among them could read a file from outside the folder)."""
    tally = Tally(str(root))
    for path in _read_files(root):
        if path.is_symlink() or not path.is_file():
            raise UnsafeSource(f"{path} is a symbolic link or not a file; a leaderboard reads only regular files "
                               "inside the source: replace the link with the file")
        tally.add(path.stat().st_size)
