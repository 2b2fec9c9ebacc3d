"""Whitespace-separated annotation files (CUB-200-2011, NABirds), read line by line: every error
names the file and the line, and the fix."""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.errors import ProtobenchError


def finite(text: str) -> float:
    """``float`` that refuses nan and infinities (they would pass range checks silently)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


class TableFile:
    """One whitespace-separated annotation file, read line by line with line-numbered errors."""

    def __init__(self, path: Path, expected: str, fix: str) -> None:
        self.path = path
        self.expected = expected
        self.fix = fix

    def error(self, lineno: int, why: str) -> ProtobenchError:
        return ProtobenchError(f"{self.path}, line {lineno}: {why}; fix that line or {self.fix}.")

    def _lines(self) -> list[tuple[int, str]]:
        """``(line number, line)`` of every non-blank line."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ProtobenchError(f"{self.path} is not UTF-8 text; {self.fix}.") from err
        return [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]

    def rows(self, types: tuple[Callable[[str], Any], ...], *, rest: bool = False) -> Iterator[tuple[int, list[Any]]]:
        """Yield ``(line number, converted fields)`` of every non-blank line.

        ``rest``: the last field takes the remainder of the line (names with spaces).
        """
        n = len(types)
        for lineno, line in self._lines():
            fields = line.split(maxsplit=n - 1) if rest else line.split()
            if len(fields) != n:
                raise self.error(lineno, f"expected '{self.expected}', got {line.strip()!r}")
            try:
                yield lineno, [convert(field) for convert, field in zip(types, fields)]
            except ValueError:
                raise self.error(lineno, f"expected '{self.expected}' with numbers, got {line.strip()!r}") from None

    def matrix(self, columns: int) -> np.ndarray:
        """An all-numeric table as an N×columns float array, parsed in C (part_locs.txt has
        176,820 lines); on any bad line, the line-numbered error of :meth:`rows`."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy warns about an empty file
            try:
                values = np.loadtxt(self.path, dtype=np.float64, ndmin=2, comments=None)
            except ValueError:
                values = None
        if values is not None and values.shape[1] == columns and np.isfinite(values).all():
            return values
        for _ in self.rows((finite,) * columns):
            pass
        raise ProtobenchError(f"{self.path} holds no '{self.expected}' lines; {self.fix}.")

    def row_error(self, row: int, why: str) -> ProtobenchError:
        """:meth:`error` for the ``row``-th non-blank line (0-based) of the file."""
        return self.error(self._lines()[row][0], why)


def rows_by_id(table: TableFile, rows: Iterator[tuple[int, list[Any]]],
               what: str) -> dict[Hashable, tuple[int, list[Any]]]:
    """Map the first field (an id) of each row to ``(line number, remaining fields)``; ids must be unique."""
    out: dict[Hashable, tuple[int, list[Any]]] = {}
    for lineno, (key, *values) in rows:
        if key in out:
            raise table.error(lineno, f"{what} {key} already appeared on line {out[key][0]}")
        out[key] = (lineno, values)
    return out


def check_contiguous(table: TableFile, ids: dict[Hashable, tuple[int, list[Any]]], what: str, first: int = 1) -> None:
    """Class and part ids must be exactly ``first`` … ``first + K − 1`` (they index arrays; CUB counts
    from 1, NABirds' parts from 0)."""
    if not ids:
        raise ProtobenchError(f"{table.path} lists no {what}s; {table.fix}.")
    for expected, key in enumerate(sorted(ids), start=first):  # type: ignore[type-var]
        if key != expected:
            raise table.error(ids[key][0], f"{what} ids must be {first}..{first + len(ids) - 1} without gaps, "
                                           f"found {key}")


def check_same_ids(table: TableFile, ids: dict[Hashable, Any], images: dict[Hashable, tuple[int, list[Any]]]) -> None:
    """Every image id of images.txt (``images``: id → (line, fields)) appears in ``table`` and nothing else does."""
    for key in ids:
        if key not in images:
            raise table.error(ids[key][0], f"image id {key} is not listed in images.txt")
    missing = [key for key in images if key not in ids]
    if missing:
        raise ProtobenchError(
            f"{table.path} has no line for image id {missing[0]} (images.txt, line {images[missing[0]][0]}; "
            f"{len(missing)} ids missing in all); {table.fix}."
        )


Rows = dict[Hashable, tuple[int, list[Any]]]


def read_split_flags(table: TableFile, id_type: Callable[[str], Any], images: Rows) -> Rows:
    """``train_test_split.txt``: one ``<image_id> <1 train / 0 test>`` line per image of images.txt."""
    flags = rows_by_id(table, table.rows((id_type, int)), "image id")
    check_same_ids(table, flags, images)
    for lineno, (flag,) in flags.values():
        if flag not in (0, 1):
            raise table.error(lineno, f"the split flag must be 1 (train) or 0 (test), got {flag}")
    return flags


def read_boxes(table: TableFile, id_type: Callable[[str], Any], images: Rows) -> Rows:
    """``bounding_boxes.txt``: one ``<image_id> <x> <y> <width> <height>`` line per image of
    images.txt, x, y ≥ 0 and width, height ≥ 1."""
    boxes = rows_by_id(table, table.rows((id_type, finite, finite, finite, finite)), "image id")
    check_same_ids(table, boxes, images)
    for lineno, (x, y, w, h) in boxes.values():
        if x < 0 or y < 0 or w < 1 or h < 1:
            raise table.error(lineno, f"the box needs x, y >= 0 and width, height >= 1, got {x} {y} {w} {h}")
    return boxes
