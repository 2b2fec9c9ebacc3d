"""``report --format latex`` needs no hand edit: booktabs without vertical rules (and a line saying
booktabs is needed), n stated once when every mean has the same, a tied best not bold, the
``--significance`` reference cell without ≈; and it compiles with pdflatex where TeX is installed."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmark.cli import main
from reports_support import check_latex, latex_rows, write_run


def report(runs: Path, capsys: pytest.CaptureFixture[str], *options: str) -> str:
    capsys.readouterr()
    assert main(["report", str(runs), "--format", "latex", *options]) == 0
    return capsys.readouterr().out


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Three methods × 3 seeds on two backbones: NPPP and vMFProto tie on DINOv2-S accuracy (shown
    80.0), ProtoPNet is close behind on DINOv2-B (no significant difference at n = 3)."""
    root = tmp_path / "runs"
    accs = {("vmfproto", "dinov2_vits14"): (79.0, 80.0, 81.0), ("nppp", "dinov2_vits14"): (81.0, 80.0, 79.0),
            ("protopnet", "dinov2_vits14"): (70.0, 71.0, 72.0), ("vmfproto", "dinov2_vitb14"): (84.0, 85.0, 86.0),
            ("nppp", "dinov2_vitb14"): (83.0, 86.0, 84.5), ("protopnet", "dinov2_vitb14"): (84.5, 84.0, 85.0)}
    for (method, backbone), values in accs.items():
        for seed, acc in enumerate(values):
            write_run(root, f"{method}-{backbone}-{seed}", method=method, backbone=backbone, seed=seed,
                      metrics={"acc": acc, "con": 40.0 + seed + len(method)})
    return root


def test_generic_table_is_booktabs_without_vertical_rules_and_states_n_once(
        runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = report(runs, capsys)
    check_latex(text)
    assert "% needs \\usepackage{booktabs} in the preamble" in text
    spec = re.search(r"\\begin\{tabular\}\{([^}]*)\}", text).group(1)
    assert "|" not in spec and not re.search(r"\\multicolumn\{\d+\}\{[^}]*\|", text)
    assert "\\cmidrule(lr){2-3} \\cmidrule(lr){4-5}" in text  # each backbone's columns under its label
    assert "(n=3)" not in text and "Every mean is over $n=3$ seeds." in text


def test_a_tied_best_is_not_bold_and_a_unique_best_is(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = {row[0]: row for row in latex_rows(report(runs, capsys, "--metrics", "acc"))}
    vmf, nppp = rows["\\textsc{vMFProto}"], rows["NPPP"]
    assert vmf[-1] == nppp[-1] == "$80.0{\\pm}1.0$"  # DINOv2-S: tied at 80.0, neither bold
    assert rows["\\textsc{vMFProto}"][-2] == "{\\boldmath$85.0{\\pm}1.0$}"  # DINOv2-B: vMFProto alone best


def test_with_significance_the_reference_cell_carries_no_approx(
        runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = {row[0]: row for row in latex_rows(report(runs, capsys, "--metrics", "acc", "--significance"))}
    best_b = rows["\\textsc{vMFProto}"][-2]  # DINOv2-B's best mean: what the others are tested against
    assert "approx" not in best_b and "85.0" in best_b
    assert "approx" in rows["ProtoPNet"][-2] and "approx" in rows["NPPP"][-2]


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX install (pdflatex not on PATH); "
                                                              "the suite does not install TeX")
def test_report_latex_compiles_with_pdflatex(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = report(runs, capsys, "--significance")
    document = "\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n\\begin{document}\n" \
               f"{table}\\end{{document}}\n"
    (tmp_path / "t.tex").write_text(document, encoding="utf-8")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "t.pdf").stat().st_size > 0
