"""Where ``export --format eee`` puts its files, and how it writes them.

Two layouts (``--layout``):

- ``flat`` (default): ``DIR/<run_id>.json``, one record per run;
- ``submission``: the Every Eval Ever datastore's tree,
  ``DIR/data/<collection>/<developer>/<model>/<uuid>.json`` and, for a run with per-image records,
  ``<uuid>_samples.jsonl`` beside it: the paths upstream's validator
  (``every_eval_ever.validator.validation_core.check_path_structure``) and the schema's
  ``detailed_evaluation_results.file_path`` pattern accept.

A path component (collection, developer, model) is checked by :func:`check_component` before
anything is written. The schema's pattern only forbids ``/``; upstream's validator further refuses
``<>:"\\|?*`` and control characters, a trailing dot or space, ``.``/``..``, the reserved name
``data`` and Windows device names, and its publisher refuses ``unknown``. The set allowed here is
narrower than all of these (``ALLOWED``), so a component protobench writes passes every one.

The ``<uuid>`` is a version-4 UUID made from the SHA-256 of the collection, developer and run id
(RFC 9562 §5.4 leaves the 122 free bits to the writer; these are pseudo-random), so exporting the
same runs again gives the same file names and a resubmission replaces its record instead of adding
a second one (docs/protocol/harness.md, Reports).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from benchmark.errors import ProtobenchError
from benchmark.output_file import staging_path

LAYOUTS: tuple[str, ...] = ("flat", "submission")
#: the datastore's root folder in a submission tree (upstream: ``parts[0] == 'data'``)
DATA_ROOT = "data"
#: a collection, developer or model folder: letters, digits, ``.``, ``_``, ``-``; first a letter or digit
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: upstream's validator refuses these as a component's stem (helpers/io.py, validation_core.py)
_WINDOWS_DEVICES = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                              *(f"LPT{i}" for i in range(1, 10))})
ALLOWED = ("letters A-Z a-z, digits 0-9, '.', '_' and '-', starting with a letter or digit, not ending "
           "with '.', at most 128 characters, and not 'data', 'unknown' or a Windows device name (CON, NUL, COM1, …)")
#: a samples file's name: ``<uuid>_samples.jsonl`` beside its record ``<uuid>.json``
SAMPLES_SUFFIX = "_samples.jsonl"
#: the export is built in ``.NAME.exporting-PID`` beside --out, then renamed (whole or not at all)
STAGING_KIND = "exporting"


def component_problem(name: str) -> str | None:
    """Why ``name`` cannot be a collection, developer or model folder (None: it can)."""
    if not _COMPONENT.fullmatch(name):
        return "has characters outside the allowed set" if name else "is empty"
    if name.endswith("."):
        return "ends with '.'"
    if name.lower() in {DATA_ROOT, "unknown"} or name.split(".", 1)[0].upper() in _WINDOWS_DEVICES:
        return "is a reserved name"
    return None


def check_component(name: str, what: str, fix: str) -> str:
    """``name`` when it is a safe datastore folder name, else one error naming ``what``, the
    allowed set and ``fix``."""
    problem = component_problem(name)
    if problem is not None:
        raise ProtobenchError(f"{what} {name!r} {problem}: an Every Eval Ever datastore folder takes {ALLOWED}; {fix}")
    return name


def record_uuid(collection: str, developer: str, run_id: str) -> str:
    """The record's file name stem: a version-4 UUID from the SHA-256 of its three identities
    (``uuid.UUID(version=4)`` sets the version and variant bits over the hash's first 16 bytes)."""
    digest = hashlib.sha256("\0".join(("protobench-eee", collection, developer, run_id)).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def submission_folder(collection: str, developer: str, model: str) -> str:
    """``data/<collection>/<developer>/<model>``: the record's folder in the submission tree."""
    return f"{DATA_ROOT}/{collection}/{developer}/{model}"


def check_eee_out(out: Path) -> None:
    """Refuse, before anything is read, an ``out`` that exists (a submission tree already there
    is named as one) or whose nearest existing folder is not a folder this process can write into."""
    if (out / DATA_ROOT).is_dir() and not out.is_symlink():
        raise ProtobenchError(f"{out} already holds an Every Eval Ever tree ({out / DATA_ROOT}); an export never "
                              "adds to one: remove it or choose another --out, then copy the new tree's data/ in")
    if out.exists() or out.is_symlink():
        raise ProtobenchError(f"{out} already exists; remove it or choose another --out")
    parent = next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ProtobenchError(f"cannot write {out}: {parent} is not a folder you can write to; choose another --out")


def write_eee(files: Iterable[tuple[str, bytes]], out: Path) -> list[str]:
    """Write ``files`` (relative POSIX path, bytes; made lazily, one run at a time) into the new
    folder ``out``: built beside it and renamed, so it appears whole or not at all, whatever
    fails while the files are made; returns their paths, in the order written."""
    check_eee_out(out)
    staging = None
    written: list[str] = []
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = staging_path(out, STAGING_KIND)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for name, data in files:
            parts = PurePosixPath(name).parts
            if not parts or name.startswith("/") or any(part in {"", ".", ".."} for part in parts):
                raise ProtobenchError(f"refusing to write {name!r}: not a plain path inside --out")
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(name)
        staging.rename(out)
    except OSError as err:
        _remove(staging)
        raise ProtobenchError(f"cannot write {out}: {err.strerror or err}; choose a folder you can write to "
                              "(--out)") from None
    except BaseException:
        _remove(staging)
        raise
    return written


def _remove(staging: Path | None) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
