"""A COCO-format annotation file read safely (``json``, never code), whose errors name the file, the
line and the entry (``annotations[12]``), so a corrupt entry is found in a one-line file too."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from benchmark.errors import ProtobenchError

_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace (RFC 8259, section 2)


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]


def _element_offsets(text: str, key: str) -> list[int]:
    """Where each element of the top-level array ``key`` starts in ``text`` (valid JSON, an object);
    for a repeated key the last one, the one ``json.loads`` keeps."""
    decoder = json.JSONDecoder()
    found: list[int] = []
    i = _skip(text, 0) + 1  # past "{"
    while True:
        i = _skip(text, i)
        if text[i] == "}":
            return found
        name, i = decoder.raw_decode(text, i)
        i = _skip(text, _skip(text, i) + 1)  # past ":"
        if name == key and text[i] == "[":
            found, i = [], i + 1
            while text[_skip(text, i)] != "]":
                i = _skip(text, i)
                found.append(i)
                _, i = decoder.raw_decode(text, i)
                i = _skip(text, i)
                i += text[i] == ","
            i = _skip(text, i) + 1  # past "]"
        else:
            _, i = decoder.raw_decode(text, i)
        i = _skip(text, i)
        i += text[i] == ","


class CocoFile:
    """One COCO annotation file: ``array(key)`` gives a top-level array, ``error(key, index, why)``
    the error naming where its entry ``index`` starts."""

    def __init__(self, path: Path, fix: str) -> None:
        self.path = path
        self.fix = fix
        try:
            self._text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ProtobenchError(f"{path} is not UTF-8 text; {fix}.") from err
        try:
            self.data = json.loads(self._text)
        except json.JSONDecodeError as err:
            raise ProtobenchError(f"{path}, line {err.lineno}: not valid JSON ({err.msg}); {fix}.") from None
        except RecursionError:
            raise ProtobenchError(f"{path}: JSON nested too deeply to be an annotation file; {fix}.") from None
        if not isinstance(self.data, dict):
            raise ProtobenchError(f"{path}: expected a JSON object with 'images', 'annotations' and 'categories'; "
                                  f"{fix}.")
        self._offsets: dict[str, list[int]] = {}

    def array(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if not isinstance(value, list):
            raise ProtobenchError(f"{self.path}: no '{key}' array; {self.fix}.")
        return value

    def line_of(self, key: str, index: int) -> int:
        if key not in self._offsets:
            self._offsets[key] = _element_offsets(self._text, key)
        return self._text.count("\n", 0, self._offsets[key][index]) + 1

    def error(self, key: str, index: int, why: str) -> ProtobenchError:
        return ProtobenchError(f"{self.path}, line {self.line_of(key, index)} ({key}[{index}]): {why}; "
                               f"fix that entry or {self.fix}.")

    def field(self, key: str, index: int, entry: Any, name: str, kind: str) -> Any:
        """``entry[name]`` of the entry ``key[index]``, of ``kind`` ``"int"``, ``"number"`` (finite)
        or ``"str"``; anything else is the entry's error."""
        if not isinstance(entry, dict):
            raise self.error(key, index, f"expected an object, got {type(entry).__name__}")
        value = entry.get(name)
        ok = {"int": isinstance(value, int) and not isinstance(value, bool),
              "number": not isinstance(value, bool) and (isinstance(value, int)
                                                         or isinstance(value, float) and math.isfinite(value)),
              "str": isinstance(value, str)}[kind]
        if not ok:
            raise self.error(key, index, f"'{name}' must be {'an' if kind == 'int' else 'a'} {kind}, got {value!r}")
        return value
