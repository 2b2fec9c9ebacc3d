"""Code snapshots: queued jobs run the suite as it was when they were submitted.

``code_snapshot(dest)`` copies the suite's git checkout into ``dest`` and, while the context
is open, makes ``dest`` the working directory, so jobs submitted inside it start there (what
submitit's ``RsyncSnapshot`` does; its file list, the git index, breaks on files deleted but
not yet committed, so the list is made here). A job started with ``python -m`` has its
working directory first on ``sys.path``, ahead of the editable install's finder, so it
imports the snapshot; ``RunJob`` checks that it did.

What is copied: every tracked file as it is in the working tree (uncommitted edits included)
and every untracked file git does not ignore, except ``tests/`` (its fixture runs would be
found by ``protobench report`` under the runs directory). ``dest`` starts as a clone of HEAD
without a checkout, so ``git describe --dirty`` in the snapshot names the commit the code
came from.
"""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.jobs import code_dir

SNAPSHOTS_DIR = ".snapshots"
EXCLUDED_DIRS = ("tests/",)


def _git(root: Path, *args: str) -> list[str]:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise ProtobenchError(f"`git {' '.join(args)}` failed in {root}: {out.stderr.strip()}")
    return out.stdout.splitlines()


def repository_root() -> Path:
    """The git checkout the running suite was imported from."""
    root = code_dir()
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True)
    except FileNotFoundError as err:
        raise ProtobenchError("git is not installed; a code snapshot needs the suite's git checkout "
                              "(or set snapshot = false in the cluster profile)") from err
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
        raise ProtobenchError(f"the suite at {root} is not a git checkout, so it cannot be snapshot; "
                              "set snapshot = false in the cluster profile to run the installed code")
    return root


def snapshot_path(runs_root: Path) -> Path:
    return runs_root.resolve() / SNAPSHOTS_DIR / datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def snapshot_files(root: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files that exist, outside ``tests/``."""
    listed = _git(root, "ls-files", "--cached", "--others", "--exclude-standard", "--deduplicate")
    return [f for f in listed if not f.startswith(EXCLUDED_DIRS) and (root / f).is_file()]


@contextlib.contextmanager
def code_snapshot(dest: Path, root: Path | None = None) -> Iterator[Path]:
    """Copy the checkout (``root``, default: the suite's own) to ``dest`` and work in ``dest``
    while the context is open."""
    if shutil.which("rsync") is None:
        raise ProtobenchError("rsync is not installed; install it (apt-get install -y rsync) or set "
                              "snapshot = false in the cluster profile")
    root = root or repository_root()
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(root, "clone", "--quiet", "--no-checkout", "--depth=1", f"file://{root}", str(dest))
    with tempfile.NamedTemporaryFile("w", suffix=".files") as listing:
        listing.write("\n".join(snapshot_files(root)) + "\n")
        listing.flush()
        copy = subprocess.run(["rsync", "-a", "--files-from", listing.name, f"{root}/", str(dest)],
                              capture_output=True, text=True)
    if copy.returncode != 0:
        raise ProtobenchError(f"copying {root} to the snapshot {dest} failed: {copy.stderr.strip()}")
    with contextlib.chdir(dest):
        yield dest
