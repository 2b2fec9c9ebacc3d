"""Run identity: resolved hyperparameters name a run, the method's source fingerprint marks a
result stale (benchmark/run/identity.py; docs/design/run-identity.md)."""
from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.run.identity import method_fingerprint, method_source_files, metrics_fingerprint, rescoring, staleness
from benchmark.run.own_code import EVERY_ADAPTER  # these results are of the test's own grid
from benchmark.run.store import (STAGE_CANCELLED_FILE, STAGE_FAILURE_FILE, STAGE_JOB_FILE, STAGE_PARTIAL_DIR, RunDir,
                                  atomic_write_json)
from methods.registry import get_method_class
from support import HELPERS
from tiny_grid import write_adapter_grid

ADAPTER = HELPERS / "example_adapter.py"
MODULE = "edited_adapter"


def _reload(module: str) -> None:
    """What a new process sees after an edit of the adapter's file."""
    sys.modules.pop(module, None)
    importlib.invalidate_caches()
    method_fingerprint.cache_clear()


@pytest.fixture()
def adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of tests/helpers/example_adapter.py importable as ``edited_adapter``, to edit."""
    source = tmp_path / "adapters" / f"{MODULE}.py"
    source.parent.mkdir()
    shutil.copy(ADAPTER, source)
    monkeypatch.syspath_prepend(str(source.parent))
    _reload(MODULE)
    yield source
    _reload(MODULE)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    _reload(MODULE)


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    grid = tmp_path / "custom.toml"
    write_adapter_grid(grid, tmp_path / "synthbirds", method=f"{MODULE}:CosinePrototypes")
    capsys.readouterr()
    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs"), *extra]) == 0
    return capsys.readouterr().out


def _results(tmp_path: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "runs" / "custom").glob("*/result.json")}


def test_a_changed_default_is_a_new_run_and_the_old_one_reads_stale(
        adapter: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, capsys)
    first_id, first = sorted(_results(tmp_path).items())[0]
    assert first["method_hyperparameters"] == {"epochs": 2, "lr": 0.1, "temperature": 0.1}  # defaults included
    assert first["method_fingerprint"] == method_fingerprint(f"{MODULE}:CosinePrototypes")
    assert first["provenance"]["adapter_paths"] == [str(adapter.parent.resolve())]  # the readers' PYTHONPATH hint

    _edit(adapter, "temperature: float = 0.1", "temperature: float = 0.2")
    out = _run(tmp_path, capsys)
    results = _results(tmp_path)
    assert len(results) == 4 and "2 done" in out and "2 stale" in out  # trained again, under new ids
    (second_id,) = {i for i, r in results.items() if r["spec"] == first["spec"]} - {first_id}
    assert results[second_id]["method_hyperparameters"]["temperature"] == 0.2
    assert staleness(first, adapters=EVERY_ADAPTER) == f"the method's defaults changed (its spec is now run {second_id})"
    assert staleness(results[second_id], adapters=EVERY_ADAPTER) is None


def test_a_comment_edit_marks_the_result_stale_and_rerun_stale_trains_it_again(
        adapter: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path, capsys)
    run_id, before = sorted(_results(tmp_path).items())[0]
    _edit(adapter, "# max over the grid", "# max over the grid (edited comment)")
    out = _run(tmp_path, capsys)
    assert f"stale, not re-run: {run_id}" in out and "the method's code changed since it ran" in out
    assert "--rerun-stale" in out and _results(tmp_path)[run_id] == before  # kept, not re-run

    run_dir = tmp_path / "runs" / "custom" / run_id  # the robustness stage's files of the old checkpoint
    for name in (STAGE_JOB_FILE, STAGE_FAILURE_FILE, STAGE_CANCELLED_FILE, f"{STAGE_PARTIAL_DIR}/k/batch-000000.json"):
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text("{}")
    out = _run(tmp_path, capsys, "--rerun-stale")
    assert not any((run_dir / name).exists() for name in (STAGE_JOB_FILE, STAGE_FAILURE_FILE, STAGE_CANCELLED_FILE,
                                                          STAGE_PARTIAL_DIR))
    after = _results(tmp_path)[run_id]
    assert after["method_fingerprint"] != before["method_fingerprint"]
    assert staleness(after, adapters=EVERY_ADAPTER) is None and "stale" not in out.split("runs:")[-1]


def test_an_earlier_versions_result_reads_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A result written before run ids covered resolved hyperparameters lies under the id of its
    declared method_args and has no fingerprint: `run` reports it stale and leaves it."""
    from benchmark.grid import load_grid

    grid = tmp_path / "custom.toml"
    write_adapter_grid(grid, tmp_path / "synthbirds")
    spec = load_grid(grid).runs[0]
    old = RunDir(tmp_path / "runs" / "custom" / spec.earlier_run_id)
    atomic_write_json(old.spec_path, spec.to_json())
    atomic_write_json(old.result_path, {"run_id": spec.earlier_run_id, "spec": spec.to_json(),
                                        "metrics": {"acc": 50.0}})
    assert spec.earlier_run_id != spec.run_id
    capsys.readouterr()
    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs"), "--only", "seed=0"]) == 0
    out = capsys.readouterr().out
    assert f"stale, not re-run: {spec.run_id}" in out and "earlier version" in out
    assert main(["status", str(tmp_path / "runs")]) == 0
    assert "1 stale" in capsys.readouterr().out


def test_the_fingerprint_covers_a_suite_adapters_package_and_what_it_imports_from_methods() -> None:
    files = method_source_files("methods.mgproto.model", "mgproto")  # its declaration's adapter module
    assert {"methods.mgproto.model", "methods.mgproto.memory", "methods.mgproto.push", "methods.base",
            "methods.common.precision"} <= set(files)
    assert "methods.registry" not in files and not any(m.startswith("torch") for m in files)
    assert set(method_source_files(get_method_class("example_adapter:CosinePrototypes").__module__, "own")) == {
        "example_adapter", "methods.base"}


# ---- one pooling rule for every reader ------------------------------------------------------------
def _two_dirs_one_cell(tmp_path: Path, second_seed: int) -> tuple[Path, Path]:
    from reports_support import write_run

    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a, "r", metrics={"acc": 60.0})
    path = write_run(b, "r", seed=second_seed, metrics={"acc": 40.0})
    data = json.loads(path.read_text())  # the same cell trained 7 epochs instead of the default
    data["spec"]["method_args"] = {"end_to_end_epochs": 7}
    data["method_hyperparameters"]["end_to_end_epochs"] = 7
    path.write_text(json.dumps(data))
    return a, b


@pytest.mark.parametrize("second_seed", [0, 1])
def test_plot_report_and_export_refuse_one_cell_of_two_settings_with_one_message(
        tmp_path: Path, second_seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _two_dirs_one_cell(tmp_path, second_seed)
    messages = []
    for command in (["report", str(a), str(b)], ["plot", str(a), str(b), "--x", "J", "--y", "acc",
                                                 "--out", str(tmp_path / "p.png")],
                    ["export", str(a), str(b), "--out", str(tmp_path / "e.csv")]):
        assert main(command) == 2
        messages.append(capsys.readouterr().err)
    assert messages[0] == messages[1] == messages[2]
    expected = ("has two results for the same seed" if second_seed == 0 else
                "differ in settings the table does not show (method_args.end_to_end_epochs 19 vs 7;")
    assert expected in messages[0]
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "e.csv").exists()


# ---- re-evaluation reproduces the run ---------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_evaluate_reproduces_the_runs_metrics_exactly(tmp_path: Path, precision: str) -> None:
    from benchmark.run.reevaluate import reevaluate
    from benchmark.run.runner import execute_run
    from tiny_grid import tiny_grid

    spec = tiny_grid("g", tmp_path / "data").runs[0].with_overrides(precision=precision)
    run_dir = tmp_path / "runs" / "g" / spec.run_id
    result = execute_run(spec, run_dir, cache_root=tmp_path / "runs" / ".token-cache", progress=False)
    again = reevaluate(run_dir)
    assert again["metrics"] == result["metrics"]  # exactly: same precision, kernels, batches, seeds
    assert again["provenance"]["precision"] == precision
    assert again["provenance"]["method_fingerprint"] == result["method_fingerprint"]
    assert json.loads((run_dir / "evaluations" / "map_pool1.json").read_text())["metrics"] == result["metrics"]


def test_a_result_scored_by_other_metric_code_is_flagged_and_rescore_replaces_its_scores(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A metric code change (as distinctiveness's tie-breaking) flags the results it scored, in
    every reader and in status, without retraining; `evaluate --rescore` puts the current scores
    into result.json and keeps the replaced ones under provenance.rescored."""
    from benchmark.run.runner import execute_run
    from benchmark.cli.status_table import status_records
    from benchmark.run.identity import mark_stale
    from reports.load import load_runs
    from tiny_grid import tiny_grid

    spec = tiny_grid("g", tmp_path / "data").runs[0]
    run_dir = tmp_path / "runs" / "g" / spec.run_id
    result = execute_run(spec, run_dir, cache_root=tmp_path / "runs" / ".token-cache", progress=False)
    assert result["metrics_fingerprint"] == metrics_fingerprint()
    assert mark_stale(load_runs([tmp_path / "runs"]))["stale"].isna().all()
    earlier = {**result, "metrics": {**result["metrics"], "dis": 12.5}}
    del earlier["metrics_fingerprint"]  # as written before result.json recorded it
    atomic_write_json(run_dir / "result.json", earlier)

    assert "scored by earlier metric code" in mark_stale(load_runs([tmp_path / "runs"]))["stale"].iloc[0]
    [record] = status_records(tmp_path / "runs")
    assert record["state"] == "done" and "--rescore" in record["rescore"]
    with pytest.MonkeyPatch.context() as patch:  # refused before the run is loaded (no compute)
        patch.setattr("benchmark.run.reevaluate.load_trained", lambda *a, **k: pytest.fail("loaded"))
        assert main(["evaluate", str(run_dir), "--rescore", "--map-pool", "2"]) == 2  # not the run's own scores
    assert "drop --map-pool 2" in capsys.readouterr().err
    assert main(["evaluate", str(run_dir), "--rescore"]) == 0
    after = json.loads((run_dir / "result.json").read_text())
    assert after["metrics"] == result["metrics"] and after["metrics_fingerprint"] == metrics_fingerprint()
    assert after["provenance"]["rescored"][-1]["metrics"]["dis"] == 12.5
    assert after["provenance"]["rescored"][-1]["metrics_fingerprint"] is None
    assert after["timing"] == result["timing"] and after["run_id"] == result["run_id"]
    assert mark_stale(load_runs([tmp_path / "runs"]))["stale"].isna().all()
    assert rescoring(after) is None and staleness(after) is None


# ---- one display name --------------------------------------------------------------------------------
def test_reports_name_a_method_by_the_display_name_its_result_recorded(tmp_path: Path) -> None:
    """Reports import no method: a result's label is the display name result.json recorded (the
    adapter's when it ran), else the paper's label of a suite method (equal to the adapters' display
    names) or an import path's class name; status, which imports the methods, shows the
    adapter's current one."""
    from benchmark.cli.status_table import status_records
    from methods.registry import display_name_of, list_methods
    from reports.curves import _run_label
    from reports.export import export_records
    from reports.figures import run_labels
    from reports.load import load_runs
    from reports.layouts import METHODS
    from reports.pivot import dimension_label
    from reports_support import write_run

    # the paper's table labels are the adapters' display names (the rivals of issue 32 are in no paper table)
    assert {key for key, _ in METHODS} <= set(list_methods())
    assert {key: label.md for key, label in METHODS} == {m: display_name_of(m) for m, _ in METHODS}
    assert display_name_of("pipnet") == "PIP-Net" and display_name_of("kmex") == "KMEx"
    assert display_name_of("vmfproto") == "vMFProto"
    path = write_run(tmp_path / "runs", "r", method="vmfproto", method_display_name="VMFProto")  # an older name
    atomic_write_json(path.parent / "spec.json", json.loads(path.read_text())["spec"])
    (record,) = status_records(tmp_path / "runs")
    (exported,) = export_records(load_runs([tmp_path / "runs"], csv=False))
    spec = {"method": "vmfproto", "prototypes_per_class": 5, "seed": 0}
    assert record["method_display_name"] == "vMFProto" == dimension_label("method", "vmfproto", {}).md
    assert {exported["method_display_name"], run_labels([spec], ["VMFProto"])[0],
            _run_label(path.parent).split()[0]} == {"VMFProto"}
    unrecorded = json.loads(path.read_text())
    del unrecorded["method_display_name"]
    atomic_write_json(path, unrecorded)
    assert _run_label(path.parent).split()[0] == "vMFProto" == run_labels([spec])[0]  # the paper's label
    assert dimension_label("method", "pkg.mod:MyMethod", {}).md == "MyMethod"
