"""The one writer of a command's ``--out`` file (``report``, ``compare``, ``export``, ``plot``,
``plan``): written atomically (no partial file), and a path that cannot be written is one line
naming the target, never a traceback or a temporary file's name."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.run.store import atomic_write_bytes


def write_output(out: Path, data: bytes) -> None:
    """Write ``data`` to ``out`` (its folder created when missing), atomically; an OSError
    becomes a :class:`ProtobenchError` naming ``out``."""
    try:
        atomic_write_bytes(Path(out), data)
    except OSError as err:  # the temporary file is gone: name what the user gave
        raise ProtobenchError(f"cannot write {out}: {err.strerror or err}; choose a folder you can write to "
                              "(--out)") from None


def within(path: Path, root: Path) -> bool:
    """Whether ``path`` is a regular file under ``root`` once every symbolic link is followed: a
    link that leads out of the folder a command was given is never read to write an output
    (``site`` and ``bundle`` copy files only where this holds)."""
    try:
        target = path.resolve(strict=True)
        return target.is_file() and target.is_relative_to(root.resolve(strict=True))
    except (OSError, RuntimeError):  # a dangling link or a loop
        return False


def staging_path(out: Path, kind: str) -> Path:
    """``.NAME.KIND-PID`` beside the folder ``out``: where this process builds (or, before deleting
    it, retires) ``out`` so that it appears whole or not at all (``bundle``, ``site``). Those that
    earlier processes of the same ``out`` and ``kind`` left when they were killed (their PID is
    gone), with any ``.NAME.KIND-PID.SUFFIX`` beside them (a partial archive), are removed first;
    a live process's are left alone."""
    prefix = f".{out.name}.{kind}-"
    for left in out.parent.glob(prefix + "*"):
        pid = left.name.removeprefix(prefix).split(".")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            if left.is_dir() and not left.is_symlink():
                shutil.rmtree(left, ignore_errors=True)
            else:
                left.unlink(missing_ok=True)
    return out.parent / f"{prefix}{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
