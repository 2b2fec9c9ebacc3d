"""Cheap content fingerprints of a dataset split (recorded in every result, docs/design/architecture.md).

The hash covers the bytes of the annotation files and the (relative path, size) of every
image and mask of the split, so it changes when annotations are edited or images are added,
removed or replaced by a file of another size, and never decodes an image.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

FINGERPRINT_CHARS = 16


def _relative(path: Path, root: Path) -> str:
    """Path relative to the dataset root (``../`` for masks stored next to it), so the
    fingerprint does not depend on where the dataset lives."""
    return Path(os.path.relpath(path, root)).as_posix()


def split_fingerprint(
    *,
    name: str,
    split: str,
    root: Path,
    annotation_files: Iterable[Path],
    content_files: Iterable[Path],
) -> str:
    """Short hex SHA-256 of ``name``, ``split``, annotation bytes and content-file (path, size) pairs."""
    digest = hashlib.sha256()
    digest.update(f"{name}\0{split}\0".encode())
    for path in annotation_files:
        digest.update(f"A\0{_relative(path, root)}\0".encode())
        digest.update(path.read_bytes())
    for path in content_files:
        digest.update(f"F\0{_relative(path, root)}\0{path.stat().st_size}\0".encode())
    return digest.hexdigest()[:FINGERPRINT_CHARS]


def derived_fingerprint(base: str, params: str) -> str:
    """Fingerprint of a dataset derived from ``base`` by a recipe described by ``params``."""
    return hashlib.sha256(f"{base}\0{params}".encode()).hexdigest()[:FINGERPRINT_CHARS]
