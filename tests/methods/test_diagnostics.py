"""Method diagnostics: range checks, the reserved ``warnings`` key, and the warning column of
``protobench status`` on a finished run's result.json."""
import io
import json

import pytest
from rich.console import Console

from benchmark.cli.status_table import print_status
from methods.base import PrototypeMethod
from methods.diagnostics import collect_diagnostics, flatten, range_warnings
from methods.testing import SyntheticTokens
from methods.registry import build_method


def test_flatten_joins_nested_keys() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": None}}, "e": [1, 2]}) == {"a.b": 1, "a.c.d": None, "e": [1, 2]}


def test_range_warnings_bounds_missing_values_and_nan() -> None:
    values = {"kappa": {"min": 1e-5, "max": 2.0}, "error": 0.3, "epoch": -1, "none": None, "nan": float("nan")}
    ranges = {"kappa.min": (1e-4, 1e5), "kappa.max": (1e-4, 1e5), "error": (0.0, 0.1), "epoch": (6, 6),
              "none": (0, 1), "absent": (0, 1), "nan": (None, 1.0)}
    assert range_warnings(values, ranges) == [
        "kappa.min = 1e-05 < 0.0001", "error = 0.3 > 0.1", "epoch = -1 < 6", "nan = nan > 1"]


def test_warnings_key_is_reserved() -> None:
    method = build_method("mgproto", SyntheticTokens().context(2))
    method.diagnostics = lambda splits: {"warnings": 1}  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="reserved"):
        collect_diagnostics(method, {})


def test_default_is_empty() -> None:
    assert PrototypeMethod.diagnostics(build_method("tesnet", SyntheticTokens().context(2)), {}) == {}
    assert collect_diagnostics(build_method("tesnet", SyntheticTokens().context(2)), {}) == {
        "warnings": [], "expected_warnings": []}


def test_status_shows_out_of_range_diagnostics(tmp_path) -> None:
    for run, warnings in (("aaaa1111", ["ot_marginal_error.mean = 0.83 > 0.1"]), ("bbbb2222", [])):
        run_dir = tmp_path / "grid" / run
        run_dir.mkdir(parents=True)
        spec = {"method": "vmfproto", "prototypes_per_class": 5, "seed": 0}
        (run_dir / "spec.json").write_text(json.dumps(spec))
        (run_dir / "result.json").write_text(json.dumps({"spec": spec, "metrics": {"acc": 80.0},
                                                         "diagnostics": {"warnings": warnings}}))
    out = io.StringIO()
    print_status(tmp_path, console=Console(file=out, width=250))
    text = out.getvalue()
    assert "warnings" in text and "ot_marginal_error.mean" in text
    assert "diagnostic out of range" in text and "aaaa1111: ot_marginal_error.mean = 0.83 > 0.1" in text
    # (both results are an earlier version's, listed as stale; only aaaa1111 has a diagnostic line)
    assert not any("diagnostic out of range" in line and "bbbb2222" in line for line in text.splitlines())


def test_status_explains_expected_warnings_once_per_grid(tmp_path) -> None:
    why = "the paper's fixed 10 Sinkhorn iterations stop early"
    for run, value in (("aaaa1111", 0.47), ("bbbb2222", 0.9), ("cccc3333", None)):
        run_dir = tmp_path / "grid" / run
        run_dir.mkdir(parents=True)
        spec = {"method": "vmfproto", "prototypes_per_class": 5, "seed": 0}
        expected = [] if value is None else [{"warning": f"ot_marginal_error.mean = {value} > 0.1", "why": why}]
        (run_dir / "spec.json").write_text(json.dumps(spec))
        (run_dir / "result.json").write_text(json.dumps({
            "spec": spec, "metrics": {"acc": 80.0},
            "diagnostics": {"warnings": ["kappa.max = 2e+05 > 1e+05"] if run == "cccc3333" else [],
                            "expected_warnings": expected}}))
    out = io.StringIO()
    print_status(tmp_path, console=Console(file=out, width=300))
    text = out.getvalue()
    assert text.count("ot_marginal_error") == 1  # one line for the grid, not one per run
    assert f"expected, not a fault: ot_marginal_error.mean > 0.1 in 2 run(s) (0.47–0.9): {why}" in text
    assert "diagnostic out of range" in text and "cccc3333: kappa.max = 2e+05 > 1e+05" in text  # still per run
