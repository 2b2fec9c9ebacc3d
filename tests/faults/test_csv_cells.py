"""No CSV the suite writes holds a formula cell (issue 30, defect 2: OWASP's rule), and numbers
stay numbers.

Case: the campaign's hostile inputs: a tidy CSV whose method, dataset and variant cells are
``=cmd|' /C calc'!A0``, ``@SUM(1+1)*cmd|' /C calc'!A0``, ``+1+cmd``, ``-2+3``, a tab and a carriage
return start; runs of an adapter whose display name is ``=cmd|' /C calc'!A0``, whose per-image
records name an image ``=HYPERLINK("http://x")``. Input: ``report --format csv`` (of the CSV and of
the runs), ``export``, ``export --per-image``, ``compare --format csv``, the per-image records'
gzip CSV. Verdict: no written cell starts with ``=``, ``+``, ``-`` (non-numeric), ``@``, tab or
CR; a negative number is still written as a number."""
from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from reports_support import write_run

from benchmark.cli import main
from benchmark.csv_cells import safe_cell
from benchmark.run.records import _encode, read_records, write_records
from benchmark.run.store import atomic_write_json

HOSTILE = ["=cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
           "\t=1+2", "\r=1+3"]


def formula_cells(text: str) -> list[str]:
    """Every cell of CSV ``text`` a spreadsheet could run: it starts with = + - @ tab or CR and is
    not a number (checked here by float(), independently of the writer's own rule)."""
    bad = []
    for row in csv.reader(io.StringIO(text, newline="")):
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                try:
                    float(cell)
                except ValueError:
                    bad.append(cell)
    return bad


def hostile_csv(path: Path) -> Path:
    rows = [{"dataset": "cub", "backbone": "dinov2_vitb14", "method": name, "J": 5, "variant": "default",
             "acc": 40.0 + i, "del": -1.5 + i} for i, name in enumerate(HOSTILE)]
    rows.append({"dataset": HOSTILE[0], "backbone": "dinov2_vitb14", "method": "protopnet", "J": 5,
                 "variant": HOSTILE[1], "acc": 40.0, "del": 2.0})
    pd.DataFrame(rows).to_csv(path, index=False, quoting=csv.QUOTE_NONNUMERIC)  # a CR stays inside its cell
    return path


def hostile_runs(root: Path) -> Path:
    runs = root / "runs" / "camp"
    for seed in range(2):  # an own adapter (not importable here) with a hostile display name, a hostile method key
        for index, (method, label) in enumerate((("evil.head:Evil", HOSTILE[0]), (HOSTILE[1], HOSTILE[2]))):
            path = write_run(runs, f"m{index}-{seed}", seed=seed, method_display_name=label,
                             evaluation={"num_images": 2}, metrics={"acc": 50.0 + seed, "con": 10.0})
            data = json.loads(path.read_text())
            data["spec"]["method"] = method
            path.write_text(json.dumps(data))
            atomic_write_json(path.parent / "spec.json", data["spec"])
            write_records(path.parent, {"per_image": pd.DataFrame({
                "index": [0, 1], "image": ['=HYPERLINK("http://x")', "-a/2.jpg"], "label": [0, 1],
                "predicted": [0, seed], "correct": [True, seed == 1], "margin": [0.5, -0.25]})})
    return root / "runs"


@pytest.mark.parametrize("command", ["report-csv-input", "report-runs", "export", "export-per-image", "compare"])
def test_security_no_csv_the_suite_writes_holds_a_formula_cell(tmp_path: Path, command: str) -> None:
    runs, out = hostile_runs(tmp_path), tmp_path / "out.csv"
    argv = {"report-csv-input": ["report", str(hostile_csv(tmp_path / "hostile.csv")), "--format", "csv",
                                 "--metrics", "acc,del"],
            "report-runs": ["report", str(runs), "--format", "csv"],
            "export": ["export", str(runs)],
            "export-per-image": ["export", str(runs), "--per-image"],
            "compare": ["compare", str(runs), "--by", "method", "--format", "csv"]}[command]
    assert main([*argv, "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert formula_cells(text) == []
    assert "'=cmd" in text or "'@SUM" in text  # the hostile text is there, shown as text
    if command == "report-csv-input":
        assert ",-1.5," in text  # a negative number (a deletion drop in percent points) stays a number
    if command == "export-per-image":
        assert ",-0.25" in text and "'=HYPERLINK" in text


def test_security_the_per_image_records_gzip_csv_holds_no_formula_cell(tmp_path: Path) -> None:
    frame = pd.DataFrame({"index": [0, 1], "image": ['=HYPERLINK("http://x")', "@a/2.jpg"], "label": [0, 1],
                          "predicted": [0, 0], "correct": [True, False], "margin": [-0.5, -2.0]})
    text = gzip.decompress(_encode(frame, ".csv.gz")).decode()
    assert formula_cells(text) == [] and "-0.5" in text
    (tmp_path / "per_image.csv.gz").write_bytes(_encode(frame, ".csv.gz"))  # read back: the suite's own paths
    assert read_records(tmp_path)["image"].tolist() == frame["image"].tolist()


@pytest.mark.parametrize("value, written", [("=1+1", "'=1+1"), ("-1.5", "-1.5"), ("+3", "+3"), ("-2e-05", "-2e-05"),
                                            ("-inf", "'-inf"), ("@x", "'@x"), ("\tx", "'\tx"), ("a=b", "a=b"),
                                            (-1.5, -1.5)])
def test_a_cell_is_neutralised_only_when_it_could_run(value: object, written: object) -> None:
    assert safe_cell(value) == written
