"""Reading the MATLAB annotation files of Stanford Dogs and Stanford Cars with ``scipy.io.loadmat``.

``loadmat`` (default options) returns a MATLAB cell array of strings as an object array
whose elements are 1-element string arrays, a numeric column as a 2-D numeric array, and a
struct array as a 2-D structured array whose fields hold 1×1 arrays.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io

from benchmark.errors import ProtobenchError


def first_existing(candidates: list[Path], what: str, fix: str) -> Path:
    """The first of ``candidates`` that is a file, else an error listing where it was looked for."""
    for path in candidates:
        if path.is_file():
            return path
    where = ", ".join(str(p) for p in candidates)
    raise ProtobenchError(f"{what} not found (looked for {where}); {fix}.")


def load_mat(path: Path, keys: tuple[str, ...], fix: str) -> dict[str, np.ndarray]:
    """Load a ``.mat`` file and return the named variables, all of which must be present."""
    try:
        mat = scipy.io.loadmat(path)
    except (scipy.io.matlab.MatReadError, ValueError, OSError, TypeError, NotImplementedError) as err:
        raise ProtobenchError(f"{path} is not a readable MATLAB .mat file ({err}); {fix}.") from err
    missing = [key for key in keys if key not in mat]
    if missing:
        raise ProtobenchError(f"{path} has no variable {missing[0]!r} (expected {', '.join(keys)}); {fix}.")
    return {key: mat[key] for key in keys}


def _scalar(value: object) -> object:
    """The single element inside a cell or struct-field entry (``array(['x'])``, ``array([[3]])``)."""
    flat = np.asarray(value).ravel()
    if flat.size != 1:
        raise ValueError(f"expected one value, got {flat.size}")
    return flat[0]


def strings(values: np.ndarray, path: Path, key: str, fix: str) -> list[str]:
    """A cell array (or struct field) of strings as a Python list."""
    try:
        out = [_scalar(v) for v in np.asarray(values).ravel()]
    except ValueError as err:
        raise ProtobenchError(f"{path}: {key!r} is not a list of strings ({err}); {fix}.") from err
    if not all(isinstance(s, str) for s in out):
        raise ProtobenchError(f"{path}: {key!r} is not a list of strings; {fix}.")
    return out


def integers(values: np.ndarray, path: Path, key: str, fix: str) -> np.ndarray:
    """A numeric column (or struct field of 1×1 numbers) as an int64 vector."""
    flat = np.asarray(values).ravel()
    try:
        numbers = np.array([float(_scalar(v)) for v in flat] if flat.dtype == object else flat, dtype=np.float64)
    except (ValueError, TypeError) as err:
        raise ProtobenchError(f"{path}: {key!r} is not a list of numbers ({err}); {fix}.") from err
    if not np.all(numbers == np.round(numbers)):
        raise ProtobenchError(f"{path}: {key!r} holds non-integer values where class numbers were expected; {fix}.")
    return numbers.astype(np.int64)


def struct_field(struct: np.ndarray, field: str, path: Path, key: str, fix: str) -> np.ndarray:
    """One field of a MATLAB struct array (e.g. ``annotations.fname``)."""
    names = struct.dtype.names or ()
    if field not in names:
        raise ProtobenchError(f"{path}: struct {key!r} has no field {field!r} (fields: {', '.join(names)}); {fix}.")
    return struct[field]


def check_labels(labels: np.ndarray, num_classes: int, path: Path, key: str, fix: str) -> np.ndarray:
    """1-based class numbers in 1..C → 0-based int64 labels."""
    bad = labels[(labels < 1) | (labels > num_classes)]
    if bad.size:
        raise ProtobenchError(f"{path}: {key!r} holds class {int(bad[0])}, outside 1..{num_classes}; {fix}.")
    return labels - 1
