"""The schema of a run's per-image and per-prototype records, checked on every read: a crafted
or damaged file is refused naming the file, the row and the column, never passed on.

``per_image``: ``index`` (0 … n-1 in order, n the ``evaluation.num_images`` its result recorded),
``image`` (a relative path below the dataset root), ``label`` and ``predicted`` (class indices
≥ 0), ``correct`` (``label == predicted``), ``margin`` (a number, not NaN: ±inf where a logit
is infinite) and optionally the per-image parts
``sta``, ``dis``, ``comp`` and on FunnyBirds ``csdc``, ``pc``, ``dc``, ``d``, ``bi``, ``sd``, ``ts``
(percent in [0, 100] or empty), ``sanity``, ``sanity_signed``
(``100 · (1 − ρ)`` in [0, 200] or empty) and ``sanity_ssim`` (in [−1, 1] or empty). ``per_prototype``: ``class``,
``prototype`` (indices ≥ 0) and optionally ``con``, ``sta`` (percent or empty). ``robustness`` (the
robustness stage's subsample, benchmark/robustness/stage.py): ``index`` (test-split positions, increasing,
below n), ``image`` and its scores, each in its range (``_ROBUSTNESS``) or empty. Any other column
is refused: a record can never carry a column of the run's identity (``run_id``, ``method``, …).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import pandas as pd

from benchmark.errors import ProtobenchError

_INDEX_COLUMNS = {"per_image": ("index", "label", "predicted"), "per_prototype": ("class", "prototype"),
                  "robustness": ("index",)}
_REQUIRED = {"per_image": ("index", "image", "label", "predicted", "correct", "margin"),
             "per_prototype": ("class", "prototype"), "robustness": ("index", "image")}
_PERCENT = {"per_image": ("sta", "dis", "comp", "csdc", "pc", "dc", "d", "bi", "sd", "ts"),  # the last 7: FunnyBirds
            "per_prototype": ("con", "sta"), "robustness": ()}
#: SSIM values in [−1, 1] (or empty): the sanity metric's second measure (metrics/sanity.py)
_UNIT = {"per_image": ("sanity_ssim",), "per_prototype": (), "robustness": ()}
#: ``100 · (1 − ρ)`` in [0, 200] (or empty): the sanity metric's scores (metrics/sanity.py)
_SANITY = {"per_image": ("sanity", "sanity_signed"), "per_prototype": (), "robustness": ()}
#: the robustness stage's per-image values (benchmark/robustness/), each in its range or empty
_ROBUSTNESS = {"correct_clean": (0.0, 1.0), "correct_attacked": (0.0, 1.0), "pac": (-math.inf, 100.0),
               "prc": (-math.inf, math.inf), "plc": (0.0, 100.0), "pixel_flipping": (0.0, math.inf),
               "region_perturbation": (-1.0, 1.0), "road": (0.0, 1.0), "infidelity": (0.0, math.inf),
               **{f"lpa_{p}_{t}": (-math.inf, math.inf) for p in ("brightness", "contrast", "saturation", "hue", "blur",
                                                                  "distortion") for t in ("focus", "dual")}}
_BOUNDED = {"per_image": {}, "per_prototype": {}, "robustness": _ROBUSTNESS}


def rewrite_command(table: str, run_dir: str) -> str:
    """The command that writes ``table`` of a run again."""
    if table == "robustness":
        return f"protobench evaluate {run_dir} --robustness FAMILIES"
    return f"protobench evaluate {run_dir}"


def check_records(frame: pd.DataFrame, table: str, path: Any, num_images: int | None) -> pd.DataFrame:
    """``frame`` when it holds ``table``'s schema (module docstring), the columns in the schema's
    types; else a ProtobenchError naming ``path``, the row and the column. ``num_images``: the
    test images its result recorded (None: not recorded)."""
    def refuse(problem: str) -> ProtobenchError:
        return ProtobenchError(f"{path} is not a record table the suite writes: {problem}; run "
                               f"`{rewrite_command(table, 'RUN_DIR')}` to write it again, or leave that run out")

    columns = [str(c) for c in frame.columns]
    missing = [c for c in _REQUIRED[table] if c not in columns]
    unknown = [c for c in columns if c not in _REQUIRED[table] and c not in _PERCENT[table] + _UNIT[table] + _SANITY[table]
               and c not in _BOUNDED[table]]
    if missing or unknown:
        raise refuse(", ".join(filter(None, (missing and f"missing column(s) {', '.join(missing)}",
                                              unknown and f"unknown column(s) {', '.join(unknown)}"))))
    checked = frame.copy()
    for column in _INDEX_COLUMNS[table]:
        checked[column] = _every(checked[column], _all_indices, lambda v, r, c=column: _index(v, refuse, r, c))
    for column in (c for c in _PERCENT[table] if c in columns):
        checked[column] = _every(checked[column], lambda s: _all_numbers(s, (0.0, 100.0), undefined=True),
                                 lambda v, r, c=column: _number(v, refuse, r, c, (0.0, 100.0), undefined=True))
    for column in (c for c in _UNIT[table] if c in columns):
        checked[column] = _every(checked[column], lambda s: _all_numbers(s, (-1.0, 1.0), undefined=True),
                                 lambda v, r, c=column: _number(v, refuse, r, c, (-1.0, 1.0), undefined=True))
    for column in (c for c in _SANITY[table] if c in columns):
        checked[column] = _every(checked[column], lambda s: _all_numbers(s, (0.0, 200.0), undefined=True),
                                 lambda v, r, c=column: _number(v, refuse, r, c, (0.0, 200.0), undefined=True))
    for column, bounds in _BOUNDED[table].items():
        if column in columns:
            checked[column] = _every(checked[column], lambda s, b=bounds: _all_numbers(s, b, undefined=True),
                                     lambda v, r, c=column, b=bounds: _number(v, refuse, r, c, b, undefined=True))
    if table == "robustness":
        _check_robustness(checked, refuse, num_images)
    if table == "per_image":
        if checked["index"].tolist() != list(range(len(checked))):
            raise refuse("column index is not 0, 1, … in order")
        if num_images is not None and len(checked) != num_images:
            raise refuse(f"{len(checked)} rows, but its result evaluated {num_images} test images")
        checked["margin"] = _every(checked["margin"], lambda s: _all_numbers(s, (-math.inf, math.inf)),
                                   lambda v, r: _number(v, refuse, r, "margin", (-math.inf, math.inf)))
        checked["image"] = _every(checked["image"], _all_images, lambda v, r: _image(v, refuse, r))
        right = checked["label"].to_numpy() == checked["predicted"].to_numpy()
        flags = checked["correct"]
        if not (flags.dtype == bool and np.array_equal(flags.to_numpy(), right)):  # else: row by row, naming it
            for row, (value, label, predicted) in enumerate(zip(flags, checked["label"], checked["predicted"])):
                if not isinstance(value, bool) and str(value) not in ("True", "False"):
                    raise refuse(f"row {row + 1}, column correct: {value!r} is not True or False")
                if (value is True or str(value) == "True") != (label == predicted):
                    raise refuse(f"row {row + 1}, column correct: {value!r} disagrees with label {label} and "
                                 f"predicted {predicted}")
        checked["correct"] = checked["label"] == checked["predicted"]
    return checked


def _check_robustness(checked: pd.DataFrame, refuse: Any, num_images: int | None) -> None:
    """A robustness table's ``image`` column: relative paths below the dataset root; its ``index``:
    test-split positions, each once, in split order (the stage's subsample), below ``num_images``."""
    checked["image"] = _every(checked["image"], _all_images, lambda v, r: _image(v, refuse, r))
    indices = checked["index"].to_numpy(dtype=np.int64)
    if len(indices) > 1 and bool((np.diff(indices) <= 0).any()):
        row = int(np.flatnonzero(np.diff(indices) <= 0)[0]) + 2
        raise refuse(f"row {row}, column index: {indices[row - 1]} does not follow {indices[row - 2]} (each test "
                     "image once, in split order)")
    if num_images is not None and len(indices) and indices[-1] >= num_images:
        row = int(np.flatnonzero(indices >= num_images)[0]) + 1
        raise refuse(f"row {row}, column index: {indices[row - 1]} is not a test image (its result evaluated "
                     f"{num_images})")


def _every(values: pd.Series, whole: Callable[[pd.Series], np.ndarray | None],
           each: Callable[[Any, int], Any]) -> Any:
    """The checked column: ``whole`` checks it at once (numpy; None when it cannot vouch for every
    value), else ``each`` checks value by value, so a refusal names the first bad row as before."""
    accepted = whole(values)
    return accepted if accepted is not None else [each(value, row) for row, value in enumerate(values)]


def _numeric(values: pd.Series, kinds: str) -> bool:
    return isinstance(values.dtype, np.dtype) and values.dtype.kind in kinds


def _all_indices(values: pd.Series) -> np.ndarray | None:
    """Every value an integer ≥ 0 (:func:`_index` of each), from an integer column."""
    array = values.to_numpy()
    return array.astype(np.int64) if _numeric(values, "iu") and bool((array >= 0).all()) else None


def _all_numbers(values: pd.Series, bounds: tuple[float, float], *, undefined: bool = False) -> np.ndarray | None:
    """Every value a number within ``bounds`` (NaN where ``undefined``): :func:`_number` of each."""
    if not _numeric(values, "iuf"):
        return None
    array = values.to_numpy(dtype=np.float64)
    ok = (array >= bounds[0]) & (array <= bounds[1])
    if undefined:
        ok |= np.isnan(array)
    return array if bool(ok.all()) else None


_CLIMBS = r"(?:^|/)\.\.(?:/|$)"  # a ".." path component
_CONTROL = r"[\x00-\x1f]"


def _all_images(values: pd.Series) -> np.ndarray | None:
    """Every value a non-empty relative path with no ``..`` and no control character (:func:`_image`)."""
    if pd.api.types.infer_dtype(values, skipna=False) != "string":
        return None
    text = values.astype(str)
    bad = (text.str.len() == 0) | text.str.startswith("/") | text.str.contains(_CLIMBS) | text.str.contains(_CONTROL)
    return values.to_numpy() if not bool(bad.any()) else None


def _index(value: Any, refuse: Any, row: int, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__index__"):
        raise refuse(f"row {row + 1}, column {column}: {value!r} is not an integer")
    if not float(value).is_integer() or value < 0:
        raise refuse(f"row {row + 1}, column {column}: {value!r} is not an integer ≥ 0")
    return int(value)


def _number(value: Any, refuse: Any, row: int, column: str, bounds: tuple[float, float], *,
            undefined: bool = False) -> float:
    """A number within ``bounds`` (inclusive); NaN only where ``undefined`` allows it."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise refuse(f"row {row + 1}, column {column}: {value!r} is not a number") from None
    if isinstance(value, (bool, str)):
        raise refuse(f"row {row + 1}, column {column}: {value!r} is not a number")
    if math.isnan(number) and undefined:  # a per-image part undefined for that image
        return number
    if not bounds[0] <= number <= bounds[1]:  # NaN fails too
        raise refuse(f"row {row + 1}, column {column}: {value!r} is not a number in [{bounds[0]:g}, {bounds[1]:g}]")
    return number


def _image(value: Any, refuse: Any, row: int) -> str:
    path = PurePosixPath(value) if isinstance(value, str) and value else None
    if path is None or path.is_absolute() or ".." in path.parts or any(ord(c) < 32 for c in value):
        raise refuse(f"row {row + 1}, column image: {value!r} is not a relative path below the dataset root")
    return value
