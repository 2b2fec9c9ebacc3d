"""Reading results never imports or runs code a result names (issue 30, defect 1; issue 31, item 3).

Case: a runs folder whose ``result.json`` names a module with a side effect (it writes a marker
file when imported), as its method (``sidefx_mod:X``) or as its trunk (``sidefx_mod:trunk``), on
PYTHONPATH. Input: ``status``, ``report``, ``export``, ``export --per-image``, ``compare``,
``plot`` of that folder. Verdict: the marker never appears. And an own adapter's results read
"unverifiable" with the PYTHONPATH fix, never "stale" nor advice to retrain;
``--check-adapters`` imports it and checks it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from reports_support import write_run

from benchmark.cli import main
from benchmark.run.identity import method_fingerprint
from benchmark.run.own_code import UNVERIFIABLE
from benchmark.run.records import write_records
from benchmark.run.store import atomic_write_json
from reports.load import UNVERIFIABLE as REPORTS_UNVERIFIABLE

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "tests" / "helpers"
SIDE_EFFECT = """import os, pathlib
pathlib.Path(os.environ["PB_MARKER"]).write_text("imported")
class X: pass
def trunk(): pass
"""


def _finished(root: Path, name: str, seed: int, **changes: object) -> Path:
    """A finished suite run (spec.json, result.json, per-image records) whose result's spec has
    ``changes``; its run directory."""
    path = write_run(root, name, seed=seed)
    data = json.loads(path.read_text())
    data["spec"].update(changes)
    data["evaluation"] = {"num_images": 2}
    path.write_text(json.dumps(data))
    atomic_write_json(path.parent / "spec.json", data["spec"])
    write_records(path.parent, {"per_image": pd.DataFrame({
        "index": [0, 1], "image": ["a/1.jpg", "a/2.jpg"], "label": [0, 1], "predicted": [0, 0],
        "correct": [True, False], "margin": [0.5, -0.2]})})
    return path.parent


@pytest.fixture
def hostile_runs(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "sidefx_mod.py").write_text(SIDE_EFFECT)
    runs = tmp_path / "runs" / "camp"
    for seed in range(2):
        _finished(runs, f"good{seed}", seed)
        _finished(runs, f"method{seed}", seed, method="sidefx_mod:X")
        _finished(runs, f"trunk{seed}", seed, backbone="sidefx_mod:trunk")
    return tmp_path


COMMANDS = {
    "status": ["status", "{runs}"],
    "report": ["report", "{runs}"],
    "report-csv": ["report", "{runs}", "--format", "csv"],
    "export": ["export", "{runs}", "--out", "{tmp}/all.csv"],
    "export-per-image": ["export", "{runs}", "--per-image", "--out", "{tmp}/images.csv"],
    "compare": ["compare", "{runs}", "--by", "method"],
    "plot": ["plot", "{runs}", "--hue", "method", "--facet", "backbone", "--out", "{tmp}/plot.png"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_security_reading_a_runs_folder_never_imports_a_module_its_results_name(
        hostile_runs: Path, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    marker = hostile_runs / "marker"
    monkeypatch.syspath_prepend(str(hostile_runs / "code"))  # importable, as from a user's PYTHONPATH
    monkeypatch.setenv("PB_MARKER", str(marker))
    monkeypatch.delitem(sys.modules, "sidefx_mod", raising=False)
    argv = [a.format(runs=hostile_runs / "runs", tmp=hostile_runs) for a in COMMANDS[command]]
    assert main(argv) == 0
    assert not marker.exists(), f"`protobench {' '.join(argv)}` imported sidefx_mod (its side effect ran)"
    if command in ("status", "report"):  # the own adapter's runs: unverifiable, not stale
        captured = capsys.readouterr()
        text = " ".join((captured.out + captured.err).split())
        assert "unverifiable" in text and "--check-adapters" in text and "PYTHONPATH=" in text
        assert "method0: stale" not in text and "method0: cannot check" not in text


def _own_adapter_runs(root: Path, adapter_path: str | None) -> Path:
    """Two finished runs of the tests' own adapter, the first recording where it was imported from."""
    runs = root / "runs" / "own"
    for seed in range(2):
        path = write_run(runs, f"r{seed}", method="example_adapter:CosinePrototypes", seed=seed)
        data = json.loads(path.read_text())
        if adapter_path is not None:
            data["provenance"]["adapter_paths"] = [adapter_path]
        path.write_text(json.dumps(data))
        atomic_write_json(path.parent / "spec.json", data["spec"])
    return runs


def test_status_and_report_of_an_adapter_that_does_not_import_say_unverifiable_with_the_pythonpath(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _own_adapter_runs(tmp_path, "/home/me/mymethods")
    for argv in (["status", str(runs)], ["report", str(runs)]):  # the adapter is not imported
        assert main(argv) == 0
        captured = capsys.readouterr()
        text = " ".join((captured.out + captured.err).split())
        assert "unverifiable" in text and "PYTHONPATH=/home/me/mymethods" in text, text
        assert "--rerun-stale" not in text and "stale result" not in text and " stale " not in text, text
    # asked to import it where it is not importable (its folder not on the path): still no advice to retrain
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p).resolve() != HELPERS])
    monkeypatch.delitem(sys.modules, "example_adapter", raising=False)
    method_fingerprint.cache_clear()
    assert main(["status", str(runs), "--check-adapters"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "unverifiable (adapter not importable" in text and "PYTHONPATH=/home/me/mymethods" in text, text
    assert "--rerun-stale" not in text
    method_fingerprint.cache_clear()


def test_check_adapters_imports_the_own_adapter_and_checks_its_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = _own_adapter_runs(tmp_path, str(HELPERS))
    assert main(["status", str(runs), "--check-adapters"]) == 0  # the helpers are on this process's path
    out = " ".join(capsys.readouterr().out.split())
    assert "2 runs: 2 done" in out and "unverifiable" not in out and "stale" not in out
    result = runs / "r0" / "result.json"
    data = json.loads(result.read_text())
    data["method_fingerprint"] = "0" * 64  # as if the adapter's code had changed since
    result.write_text(json.dumps(data))
    assert main(["status", str(runs), "--check-adapters"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 done, 1 stale" in out and "the method's code changed since it ran" in out
    assert main(["status", str(runs)]) == 0  # without the option: not imported, not judged
    out = " ".join(capsys.readouterr().out.split())
    assert "2 runs: 2 done" in out and out.count("unverifiable") >= 2


def test_the_unverifiable_word_is_one_word_in_the_harness_and_the_reports() -> None:
    assert UNVERIFIABLE == REPORTS_UNVERIFIABLE
