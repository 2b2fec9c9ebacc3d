"""Per-image records are checked, their export carries each run's verdict, and every ``--out``
that cannot be written is one line (issue 30, defects 3, 4 and 6).

Cases and verdicts:

- a crafted ``per_image.csv.gz`` (its own ``run_id`` column ``SPOOFED``, a formula image, a label
  that is text, more rows than the run evaluated): ``export --per-image`` refuses it naming the
  file, the row and the column, before writing; the run's identity is never the record's;
- ``export --per-image`` of runs scored by other metric code: every row's ``stale`` says so, as
  the per-run export does;
- ``report``, ``compare``, ``export``, ``plot`` with ``--out /proc/pb-x.*``: exit 2 and one line
  naming the target, no traceback, no temporary file named.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from reports_support import write_run

from benchmark.cli import main
from benchmark.run.records import write_records
from benchmark.run.store import atomic_write_json

GOOD = {"index": [0, 1], "image": ["a/1.jpg", "a/2.jpg"], "label": [0, 1], "predicted": [0, 0],
        "correct": [True, False], "margin": [0.5, -0.2]}


def runs_with_records(root: Path, records: dict[str, list[object]] | None = None, **extra: object) -> Path:
    """Two finished runs of two methods with per-image records (``records`` for the first)."""
    runs = root / "runs" / "camp"
    for index, method in enumerate(("vmfproto", "protopnet")):
        path = write_run(runs, f"r{index}", method=method, evaluation={"num_images": 2}, **extra)
        atomic_write_json(path.parent / "spec.json", json.loads(path.read_text())["spec"])
        write_records(path.parent, {"per_image": pd.DataFrame(records if index == 0 and records else GOOD)})
    return root / "runs"


@pytest.mark.parametrize("crafted, named", [
    ({**GOOD, "run_id": ["SPOOFED", "SPOOFED"]}, "unknown column(s) run_id"),
    ({**GOOD, "method": ["=cmd|' /C calc'!A0"] * 2}, "unknown column(s) method"),
    ({**GOOD, "label": ["x", "1"]}, "row 1, column label"),
    ({**GOOD, "correct": [False, False]}, "row 1, column correct"),
    ({**GOOD, "margin": [float("nan"), 0.1]}, "row 1, column margin"),
    ({**GOOD, "sta": [100.0, 1e300]}, "row 2, column sta"),
    ({**GOOD, "image": ["../../etc/passwd", "a/2.jpg"]}, "row 1, column image"),
    ({k: v * 2 for k, v in GOOD.items()}, "column index is not 0, 1"),
])
def test_security_a_crafted_per_image_record_is_refused_naming_row_and_column(
        tmp_path: Path, crafted: dict[str, list[object]], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    runs, out = runs_with_records(tmp_path, crafted), tmp_path / "images.csv"
    assert main(["export", str(runs), "--per-image", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert named in err and "per_image" in err and "r0" in err, err
    assert not out.exists()


def test_security_the_records_of_a_run_never_override_its_identity(tmp_path: Path) -> None:
    runs, out = runs_with_records(tmp_path), tmp_path / "images.csv"
    assert main(["export", str(runs), "--per-image", "--out", str(out)]) == 0
    rows = pd.read_csv(out)
    expected = {json.loads((runs / "camp" / name / "result.json").read_text())["run_id"] for name in ("r0", "r1")}
    assert set(rows["run_id"]) == expected and len(rows) == 4


def test_export_per_image_fills_stale_as_the_per_run_export_does(tmp_path: Path) -> None:
    runs = runs_with_records(tmp_path, metrics_fingerprint="scored-by-older-metric-code")
    assert main(["export", str(runs), "--per-image", "--out", str(tmp_path / "images.csv")]) == 0
    assert main(["export", str(runs), "--out", str(tmp_path / "runs.csv")]) == 0
    per_image, per_run = pd.read_csv(tmp_path / "images.csv"), pd.read_csv(tmp_path / "runs.csv")
    assert per_image["stale"].notna().all() and per_run["stale"].notna().all()
    assert dict(zip(per_image["run_id"], per_image["stale"])) == dict(zip(per_run["run_id"], per_run["stale"]))
    assert per_image["stale"].str.contains("scored by other metric code").all()


@pytest.mark.parametrize("command, target", [
    (["report"], "/proc/pb-x.md"), (["report", "--format", "csv"], "/proc/pb-x.csv"),
    (["compare", "--by", "method"], "/proc/pb-x.md"), (["export"], "/proc/pb-x.csv"),
    (["plot", "--hue", "method"], "/proc/pb-x.png"),
])
def test_an_unwritable_out_is_one_line_naming_the_target(
        tmp_path: Path, command: list[str], target: str, capsys: pytest.CaptureFixture[str]) -> None:
    runs = runs_with_records(tmp_path)
    capsys.readouterr()
    code = main([command[0], str(runs), *command[1:], "--out", target])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert f"cannot write {target}" in err and ".tmp" not in err and "Traceback" not in err
