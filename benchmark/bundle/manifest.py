"""The SHA-256 manifest of a bundle (``SHA256SUMS``, in ``sha256sum``'s format, so
``sha256sum -c SHA256SUMS`` checks it too) and its verification, which names every changed,
missing or unlisted file."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from benchmark.errors import ProtobenchError

MANIFEST_FILE = "SHA256SUMS"
HEAD_FILE = "head.safetensors"  # a run's trained head in a bundle (benchmark/bundle/head.py, --checkpoints)
_CHUNK = 1 << 20
#: what commands write into a bundle when they read it as a runs directory, outside the manifest:
#: ``evaluate``'s evaluations/ of a run and the token cache ``evaluate`` builds beside the grids
LOCAL_OUTPUTS = ("evaluations", ".token-cache")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(root: Path) -> Path:
    """Hash every file under ``root`` (sorted paths, POSIX separators) into ``root/SHA256SUMS``."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    path = root / MANIFEST_FILE
    path.write_text("".join(f"{sha256_of(root / name)}  {name}\n" for name in files), encoding="utf-8")
    return path


@dataclass
class Verification:
    """What ``bundle verify`` found: files whose hash differs, listed files that are absent, files
    the manifest does not list (a run added after bundling), symbolic links (never part of a
    bundle, whatever they point to: refused, not followed), and local outputs it leaves aside."""

    checked: int = 0
    links: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.links or self.changed or self.missing or self.unlisted)


def _listed(root: Path) -> dict[str, str]:
    path = root / MANIFEST_FILE
    if not path.is_file():
        raise ProtobenchError(f"{root} is not a bundle: it has no {MANIFEST_FILE}; make one with "
                              "`protobench bundle RUNS_DIR --out DIR`")
    if path.is_symlink():
        raise ProtobenchError(f"{path} is a symbolic link; a bundle holds no links, so it cannot be trusted: "
                              "ask for it again")
    return parse_manifest(path.read_bytes(), path)


def parse_manifest(data: bytes, where: Path | str) -> dict[str, str]:
    """Relative path → SHA-256 of each line of a manifest's bytes (``where`` names it in errors)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobenchError(f"{where} is not a text manifest (not UTF-8): the bundle was altered or damaged, so "
                              "it cannot be trusted; ask for it again") from None
    listed: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        digest, sep, name = line.partition("  ")
        parts = PurePosixPath(name).parts
        if (not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name
                or PurePosixPath(name).is_absolute() or ".." in parts):
            raise ProtobenchError(f"{where} line {number} is not '<sha256>  <relative path>': {line[:120]!r}; "
                                  "the manifest was altered, so the bundle cannot be trusted: ask for it again")
        listed[name] = digest
    return listed


def _is_local_output(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return parts[0] == LOCAL_OUTPUTS[1] or (len(parts) == 4 and parts[2] == LOCAL_OUTPUTS[0])


def verify_bundle(root: Path) -> Verification:
    """Check every file the manifest lists against its hash, and that no other file was added."""
    listed = _listed(root)
    result = Verification()
    result.links = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_symlink())
    for name, digest in listed.items():
        path = root / name
        if name in result.links or any(name.startswith(link + "/") for link in result.links):
            continue  # a link (or a path through one) is never read
        if not path.is_file():
            result.missing.append(name)
            continue
        result.checked += 1
        if sha256_of(path) != digest:
            result.changed.append(name)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.name != MANIFEST_FILE):
        name = path.relative_to(root).as_posix()
        if name not in listed:
            (result.local if _is_local_output(name) else result.unlisted).append(name)
    return result
