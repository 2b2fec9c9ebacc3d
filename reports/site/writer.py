"""Writing a site folder without ever losing a file the suite did not write.

The site's marker (``.protobench-site``) lists every file the build wrote with its SHA-256. A
folder is replaced only when it is empty or its marker lists exactly the files it holds, each
unchanged; it is never replaced when it is, holds or lies inside one of the inputs, nor when it is
a symbolic link. The new site is written beside it and renamed into place after every input was
read, so a refusal or a failure deletes nothing, and an interrupted build leaves the old site.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.output_file import staging_path

SITE_MARKER = ".protobench-site"
MARKER_FORMAT = "protobench-site-1"
_SHOWN = 5  # names listed in a refusal


def marker_bytes(files: Mapping[str, bytes]) -> bytes:
    """The marker of a site made of ``files`` (relative POSIX name → content)."""
    listing = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
    return (json.dumps({"format": MARKER_FORMAT, "files": listing}, indent=1, sort_keys=True) + "\n").encode()


def check_out(out: Path, inputs: Sequence[Path]) -> None:
    """Refuse an ``--out`` the site may not replace (see the module), before anything is written."""
    if out.is_symlink():
        raise ProtobenchError(f"--out {out} is a symbolic link; give the folder it points to ({out.resolve()}) "
                              "or a new folder")
    if out.exists() and not out.is_dir():
        raise ProtobenchError(f"--out {out} is a file; give a folder for the site")
    real = out.resolve()
    for given in inputs:
        source = Path(given).resolve()
        if real == source or source.is_relative_to(real) or real.is_relative_to(source):
            relation = "is" if real == source else "holds" if source.is_relative_to(real) else "lies inside"
            raise ProtobenchError(f"--out {out} {relation} the input {given}; write the site to a folder outside "
                                  "the runs it shows (nothing was deleted)")
    if out.is_dir() and any(out.iterdir()):
        foreign = _not_ours(out)
        if foreign:
            raise ProtobenchError(f"--out {out} holds {_listed(foreign)} that protobench did not write there (or "
                                  "that changed since); move them out or choose another folder (nothing was deleted)")


def _not_ours(out: Path) -> list[str]:
    """The entries of an existing folder that its marker does not vouch for (every entry when it
    has no valid marker)."""
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                     if p.is_symlink() or not p.is_dir())
    marker = out / SITE_MARKER
    try:
        data = json.loads(marker.read_bytes()) if marker.is_file() and not marker.is_symlink() else None
    except (OSError, ValueError, RecursionError):
        data = None
    listed = data.get("files") if isinstance(data, dict) and data.get("format") == MARKER_FORMAT else None
    if not isinstance(listed, dict):
        return [name for name in present if name != SITE_MARKER] or [SITE_MARKER]
    foreign = []
    for name in present:
        if name == SITE_MARKER:
            continue
        path = out / name
        if path.is_symlink() or listed.get(name) != hashlib.sha256(path.read_bytes()).hexdigest():
            foreign.append(name)
    return foreign


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
    return f"{len(names)} file(s) ({shown})"


def replace_site(out: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (with their marker) as the folder ``out``, replacing the site there
    (:func:`check_out` passed): built beside it, then renamed into place."""
    staging = staging_path(out, "site")  # a killed build's folder is removed here
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        for name, data in sorted({**files, SITE_MARKER: marker_bytes(files)}.items()):
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(data)
        if out.exists():
            retired = staging_path(out, "old")
            out.rename(retired)
            staging.rename(out)
            shutil.rmtree(retired)
        else:
            staging.rename(out)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise ProtobenchError(f"cannot write the site to {out}: {err.strerror or err}; choose a folder you can "
                              "write to (--out)") from None
