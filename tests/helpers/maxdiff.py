"""``pytest -p maxdiff tests/methods/test_pipnet.py``: how far an adapter is from its official code.

The equality tests assert bounds (``(ours - ref).abs().max() < 1e-6``); this opt-in plugin records
the measured distance behind each assertion and prints one line per assertion at the end: test,
line, the largest |actual − expected| it saw, and the line's source. It records

* ``torch.testing.assert_close``, ``numpy.testing.assert_allclose``, ``torch.allclose`` and
  ``pytest.approx`` comparisons (their max |actual − expected|), ``torch.equal`` when true (0);
* the idioms ``(a - b).abs().max() < tol`` and ``abs(float(a) - float(b)) < tol`` written in the
  test module itself (``abs`` and ``numpy.abs`` called from the test's own file).

A difference asserted to be *large* (``abs(x - y) > 1e-3``) is recorded too: read the source
column. Loaded only with ``-p maxdiff`` (it patches those functions for the session).
"""
from __future__ import annotations

import builtins
import linecache
import sys
from typing import Any

import numpy as np
import pytest
import torch

_RECORDED: dict[tuple[str, str, int], float] = {}
_current: dict[str, str | None] = {"test": None, "file": None}


def _test_line() -> int:
    """The line of the running test's own file that led here (0 when none)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename != _current["file"]:
        frame = frame.f_back
    return frame.f_lineno if frame is not None else 0


def _record(value: float) -> None:
    if _current["test"] is None:
        return
    key = (_current["test"], _current["file"] or "", _test_line())
    _RECORDED[key] = max(_RECORDED.get(key, 0.0), float(value))


def _max_abs_difference(a: Any, b: Any) -> float | None:
    try:
        a = a.detach().cpu().double().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, dtype=np.float64)
        b = b.detach().cpu().double().numpy() if isinstance(b, torch.Tensor) else np.asarray(b, dtype=np.float64)
        difference = np.abs(a - b)
    except (TypeError, ValueError, RuntimeError):
        return None
    finite = difference[np.isfinite(difference)]
    return float(finite.max()) if finite.size else 0.0


def _recording_comparison(compare):  # noqa: ANN001, ANN202
    def compared(actual, expected, *args, **kwargs):  # noqa: ANN001, ANN202
        result = compare(actual, expected, *args, **kwargs)
        difference = _max_abs_difference(actual, expected)
        if difference is not None:
            _record(difference)
        return result
    return compared


def _recording_equal(equal):  # noqa: ANN001, ANN202
    def compared(a, b):  # noqa: ANN001, ANN202
        result = equal(a, b)
        if result:
            _record(0.0)
        return result
    return compared


class _RecordingApprox:
    """``pytest.approx`` whose ``==`` records |actual − expected| first."""

    def __init__(self, expected: Any, *args: Any, **kwargs: Any) -> None:
        self.expected, self.approx = expected, _APPROX(expected, *args, **kwargs)

    def __eq__(self, actual: object) -> bool:
        difference = _max_abs_difference(actual, self.expected)
        if difference is not None:
            _record(difference)
        return self.approx == actual

    def __repr__(self) -> str:
        return repr(self.approx)


def _from_test_file() -> bool:
    return sys._getframe(2).f_code.co_filename == _current["file"]


def _recording_abs(value):  # noqa: ANN001, ANN202
    result = _ABS(value)
    if _current["test"] is not None and _from_test_file():
        if isinstance(result, torch.Tensor):
            result._maxdiff_abs = True  # recorded when its .max() meets < or <=
        elif isinstance(result, np.ndarray):
            _record(float(result.max()) if result.size else 0.0)
        elif isinstance(result, (int, float)):
            _record(result)
    return result


def _recording_np_abs(value, *args, **kwargs):  # noqa: ANN001, ANN202
    result = _NP_ABS(value, *args, **kwargs)
    if _current["test"] is not None and _from_test_file() and np.size(result):
        _record(float(np.max(result)))
    return result


def _flagging_abs(self, *args, **kwargs):  # noqa: ANN001, ANN202
    result = _TENSOR_ABS(self, *args, **kwargs)
    if _current["test"] is not None and _from_test_file():
        result._maxdiff_abs = True
    return result


def _flagging_max(self, *args, **kwargs):  # noqa: ANN001, ANN202
    result = _TENSOR_MAX(self, *args, **kwargs)
    if not args and not kwargs and getattr(self, "_maxdiff_abs", False) and result.dim() == 0:
        result._maxdiff_max_abs = True
    return result


def _recording_less(less):  # noqa: ANN001, ANN202
    def compared(self, other):  # noqa: ANN001, ANN202
        if getattr(self, "_maxdiff_max_abs", False) and _from_test_file():
            _record(float(self.detach()))
        return less(self, other)
    return compared


_ABS, _NP_ABS, _APPROX = builtins.abs, np.abs, pytest.approx
_TENSOR_ABS, _TENSOR_MAX = torch.Tensor.abs, torch.Tensor.max


def pytest_configure(config: pytest.Config) -> None:
    torch.testing.assert_close = _recording_comparison(torch.testing.assert_close)
    np.testing.assert_allclose = _recording_comparison(np.testing.assert_allclose)
    torch.allclose = _recording_comparison(torch.allclose)
    torch.equal = _recording_equal(torch.equal)
    pytest.approx = _RecordingApprox
    builtins.abs, np.abs = _recording_abs, _recording_np_abs
    torch.Tensor.abs, torch.Tensor.max = _flagging_abs, _flagging_max
    torch.Tensor.__lt__ = _recording_less(torch.Tensor.__lt__)
    torch.Tensor.__le__ = _recording_less(torch.Tensor.__le__)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # noqa: ANN201
    _current["test"], _current["file"] = item.nodeid, str(item.path)
    yield
    _current["test"] = _current["file"] = None


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    terminalreporter.section("max |actual - expected| per assertion")
    for (test, path, line), value in sorted(_RECORDED.items()):
        source = linecache.getline(path, line).strip()
        terminalreporter.write_line(f"{test}:{line}  {value:.3g}  {source}")
