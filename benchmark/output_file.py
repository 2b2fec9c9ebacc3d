"""The one writer of a command's ``--out`` file (``report``, ``compare``, ``export``, ``plot``,
``plan``): written atomically (no partial file), and a path that cannot be written is one line
naming the target, never a traceback or a temporary file's name."""
from __future__ import annotations

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
