"""Writing a generated dataset (``synthbirds``, and ``make-data nabirds|partimagenet``) into its
folder so that no interrupted run leaves one that looks complete: it is built in a hidden sibling
folder and renamed into place with a marker file (the generator, its version and its arguments)
inside. A folder already holding that generator's output with the same arguments is kept as it
is; that generator's output with other arguments is replaced; any other non-empty folder is
refused. A killed run can leave a hidden ``.<name>.partial-*`` folder next to the output; it is
never read and may be deleted."""
from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.errors import ProtobenchError


@dataclass(frozen=True)
class Generator:
    """One generated dataset: its generator name and version (recorded in ``marker``), the public
    function that writes it (named in errors), what it is called in messages, its class limit and
    ``write(folder, classes, images_per_class, seed, image_size)``."""

    name: str
    version: int
    function: str
    what: str
    marker: str
    max_classes: int
    write: Callable[[Path, int, int, int, int], None]


def generate_set(out: str | Path, generator: Generator, *, classes: int, images_per_class: int, seed: int,
                 image_size: int) -> Path:
    """Check the arguments, then write ``generator``'s set into ``out`` (:func:`generate_into`)."""
    check_generation_args(generator.function, classes=classes, images_per_class=images_per_class, seed=seed,
                          image_size=image_size, max_classes=generator.max_classes)
    record = {"generator": generator.name, "version": generator.version, "classes": int(classes),
              "images_per_class": int(images_per_class), "seed": int(seed), "image_size": int(image_size)}
    return generate_into(out, what=generator.what, marker=generator.marker, record=record,
                         write=lambda folder: generator.write(folder, classes, images_per_class, seed, image_size))


def check_generation_args(function: str, *, classes: int, images_per_class: int, seed: int, image_size: int,
                          max_classes: int, min_image_size: int = 64) -> None:
    """One error naming ``function`` and the first argument out of range."""
    for arg, value, low in (("classes", classes, 1), ("images_per_class", images_per_class, 1),
                            ("seed", seed, 0), ("image_size", image_size, min_image_size)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
            raise ProtobenchError(f"{function}: {arg} must be an integer >= {low}, got {value!r}.")
    if classes > max_classes:
        raise ProtobenchError(f"{function}: classes must be at most {max_classes}, got {classes}.")


def read_marker(out: Path, marker: str, generator: str) -> dict[str, Any] | None:
    """The generation record in ``out/marker``, if readable and ``generator``'s."""
    try:
        record = json.loads((out / marker).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("generator") == generator else None


def generate_into(out: str | Path, *, what: str, marker: str, record: dict[str, Any],
                  write: Callable[[Path], None]) -> Path:
    """Run ``write(folder)`` into a hidden sibling of ``out`` and rename it into place with
    ``record`` in ``marker`` (see the module docstring); return ``out``, resolved."""
    out = Path(out).resolve()
    generator = record["generator"]
    if out.exists():
        if not out.is_dir():
            raise ProtobenchError(f"{out} is a file, not a folder; choose a new or empty folder for {what}.")
        if any(out.iterdir()):
            previous = read_marker(out, marker, generator)
            if previous is None:
                raise ProtobenchError(
                    f"{out} is not empty and is not a {what} dataset (no valid {marker}); choose a new or empty folder."
                )
            if previous == record:
                return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp, old = out.with_name(f".{out.name}.partial-{tag}"), out.with_name(f".{out.name}.old-{tag}")
    tmp.mkdir()
    try:
        write(tmp)
        (tmp / marker).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        if out.exists() and read_marker(out, marker, generator) != record:  # another process may have finished it
            os.replace(out, old)
        if not out.exists():
            os.replace(tmp, out)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
    return out
