"""Code snapshots: queued jobs run the suite as it was when they were submitted.

``code_snapshot(dest)`` copies the code of the suite's git checkout into ``dest`` and, while
the context is open, makes ``dest`` the working directory, so jobs submitted inside it start
there (what submitit's ``RsyncSnapshot`` does). A job started with ``python -m`` has its
working directory first on ``sys.path``, ahead of the editable install's finder, so it imports
the snapshot; ``RunJob`` checks that it did.

What is copied: every tracked file as it is in the working tree (uncommitted edits included),
except ``tests/`` (its fixture runs would be found by ``protobench report`` under the runs
directory). Untracked files are never copied, ignored or not: a ``.env`` or a key lying in the
checkout stays there. ``dest/.protobench-snapshot/`` records where the code came from:
``source.json`` (the commit, ``git describe``, whether tracked files differed from it and the
fingerprint of those edits, the code version, the checkout's path, the time) and
``uncommitted.diff`` (``git diff --binary HEAD``: ``git apply`` on a checkout of the commit
gives the code of the snapshot). :func:`benchmark.run.provenance.code_version` reads the record,
so results of queued jobs name the checkout's commit, not the snapshot.
"""
from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from benchmark.errors import ProtobenchError
from slurm.jobs import code_dir
from benchmark.run.provenance import DIFF_FILE, SNAPSHOT_RECORD_DIR, SOURCE_FILE, checkout_state, git, uncommitted_diff
from benchmark.run.store import atomic_write_bytes, atomic_write_json

SNAPSHOTS_DIR = ".snapshots"
EXCLUDED_DIRS = ("tests/",)


def repository_root() -> Path:
    """The git checkout the running suite was imported from."""
    root = code_dir()
    try:
        top = Path(git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve()
    except ProtobenchError as err:
        raise ProtobenchError(f"the suite at {root} is not a git checkout, so it cannot be snapshot ({err}); "
                              "set snapshot = false in the cluster profile to run the installed code") from err
    if top != root:
        raise ProtobenchError(f"the suite at {root} is not the top of a git checkout ({top} is), so it cannot be "
                              "snapshot; set snapshot = false in the cluster profile to run the installed code")
    return root


def snapshot_path(runs_root: Path) -> Path:
    return runs_root.resolve() / SNAPSHOTS_DIR / datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def snapshot_files(root: Path) -> list[str]:
    """Tracked files present in the working tree, outside ``tests/`` (a deleted file is left out)."""
    listed = git(root, "ls-files", "--cached", "--deduplicate", "-z").decode().split("\0")
    return [f for f in listed if f and not f.startswith(EXCLUDED_DIRS)
            and ((root / f).is_symlink() or (root / f).is_file())]


def take_snapshot(dest: Path, root: Path) -> None:
    """Copy the tracked files of ``root`` to the new directory ``dest`` and record the
    checkout's state; on any failure nothing of ``dest`` is left."""
    state = checkout_state(root)
    dest.mkdir(parents=True)
    try:
        files = snapshot_files(root)
        for name in files:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name, follow_symlinks=False)  # a tracked symlink stays a link
        record = dest / SNAPSHOT_RECORD_DIR
        atomic_write_bytes(record / DIFF_FILE, uncommitted_diff(root) if state.dirty else b"")
        atomic_write_json(record / SOURCE_FILE, {
            "commit": state.commit, "describe": state.describe, "dirty": state.dirty, "edits": state.edits,
            "code_version": state.version, "checkout": str(root), "files": len(files),
            "created": datetime.now().astimezone().isoformat(timespec="seconds"),
        })
    except BaseException as err:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(err, OSError):
            raise ProtobenchError(f"copying {root} to the code snapshot {dest} failed: {err}") from err
        raise


@contextlib.contextmanager
def code_snapshot(dest: Path, root: Path | None = None) -> Iterator[Path]:
    """Snapshot the checkout (``root``, default: the suite's own) into ``dest`` and work in
    ``dest`` while the context is open."""
    take_snapshot(dest, root or repository_root())
    with contextlib.chdir(dest):
        yield dest
