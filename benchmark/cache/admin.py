"""``protobench cache ls | verify | rm``: what is in a token cache, whether it is intact, removal.

Removal renames an entry aside first (so no new reader opens it) and deletes it unless a
process on this node still holds it open; jobs on other nodes that read a removed entry may
fail (on NFS with ``ESTALE``), so remove entries while no job of theirs runs.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from benchmark.cache.lock import Owner, filesystem_now
from benchmark.cache.entry import read_manifest, verify_entry
from benchmark.cache.store import (
    ASIDE_PREFIX,
    BUILDER,
    TMP_PREFIX,
    build_is_dead,
    in_use_here,
    last_used,
    move_aside,
    remove_leftovers,
)
from benchmark.errors import ProtobenchError

DAY_SECONDS = 86400.0


@dataclass(frozen=True)
class CacheItem:
    """One folder of a cache directory: a published entry, one moved aside, or a build."""

    name: str
    path: Path
    state: str  # "entry" | "moved aside" | "building" | "dead build"
    bytes: int
    built_by: str
    last_used: float


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def _built_by(path: Path) -> str:
    manifest = read_manifest(path) or {}
    who = manifest.get("built_by", {})
    parts = [manifest.get("created", ""), f"{who.get('user', '?')}@{who.get('host', '?')}" if who else "",
             manifest.get("device", ""), f"{manifest['build_seconds']:.0f} s" if "build_seconds" in manifest else ""]
    if "staged_from" in manifest:
        parts.append(f"copy of {manifest['staged_from']}")
    return ", ".join(p for p in parts if p)


def list_cache(cache_dir: Path) -> list[CacheItem]:
    """Every entry, entry moved aside and build folder under ``cache_dir``, by name."""
    if not cache_dir.is_dir():
        return []
    now = filesystem_now(cache_dir)
    items = []
    for path in sorted(p for p in cache_dir.iterdir() if p.is_dir()):
        if path.name.startswith(TMP_PREFIX):
            owner = Owner.read(path / BUILDER)
            state = "dead build" if build_is_dead(path, now) else "building"
            items.append(CacheItem(path.name, path, state, _folder_bytes(path),
                                   owner.describe() if owner else "?", path.stat().st_mtime))
        elif path.name.startswith(ASIDE_PREFIX):
            items.append(CacheItem(path.name, path, "moved aside", _folder_bytes(path), _built_by(path), last_used(path)))
        elif not path.name.startswith(".") and read_manifest(path) is not None:
            items.append(CacheItem(path.name, path, "entry", _folder_bytes(path), _built_by(path), last_used(path)))
    return items


def matching(cache_dir: Path, prefixes: list[str]) -> list[Path]:
    """Published entries whose name, or key digest (the name's last part), starts with a prefix."""
    entries = [item.path for item in list_cache(cache_dir) if item.state == "entry"]
    chosen = [p for p in entries if any(p.name.startswith(x) or p.name.rsplit("-", 1)[-1].startswith(x)
                                        for x in prefixes)]
    missing = [x for x in prefixes if not any(p.name.startswith(x) or p.name.rsplit("-", 1)[-1].startswith(x)
                                              for p in entries)]
    if missing:
        raise ProtobenchError(f"No token-cache entry in {cache_dir} matches {', '.join(missing)}; "
                              f"`protobench cache ls` lists them.")
    return chosen


def verify_cache(cache_dir: Path, prefixes: list[str]) -> dict[str, list[str]]:
    """Problems per entry (all entries, or those matching ``prefixes``) with every block rehashed."""
    paths = matching(cache_dir, prefixes) if prefixes else [i.path for i in list_cache(cache_dir) if i.state == "entry"]
    return {path.name: verify_entry(path) for path in paths}


def remove_entry(entry: Path) -> str:
    """Rename ``entry`` aside, then delete it unless a process on this node holds it open. An
    entry that is a symbolic link (to an entry kept elsewhere) loses the link only."""
    if entry.is_symlink():
        target = entry.readlink()
        entry.unlink()
        return f"{entry.name}: removed the symbolic link (its target {target} is kept)"
    aside = move_aside(entry)
    if aside is None:
        return f"{entry.name}: already gone"
    if in_use_here(aside):
        return (f"{entry.name}: moved aside to {aside.name}; a process on this node still reads it, so it is "
                f"deleted by a later `protobench cache rm --unused` once idle")
    shutil.rmtree(aside)
    return f"{entry.name}: removed"


def remove_cache(cache_dir: Path, prefixes: list[str], unused_days: float | None) -> list[str]:
    """Remove the entries matching ``prefixes``; with ``unused_days``, also every entry not opened for
    that many days, and leftovers nobody uses (dead builds, idle entries moved aside)."""
    if not prefixes and unused_days is None:
        raise ProtobenchError("cache rm needs entry names (or prefixes) or --unused [DAYS]")
    paths = matching(cache_dir, prefixes) if prefixes else []
    if unused_days is not None:
        cutoff = time.time() - unused_days * DAY_SECONDS
        paths += [i.path for i in list_cache(cache_dir)
                  if i.state == "entry" and i.last_used < cutoff and i.path not in paths]
    done = [remove_entry(path) for path in paths]
    if unused_days is not None:
        done += [f"{path.name}: removed (leftover)" for path in remove_leftovers(cache_dir)]
    return done
