"""``--style paper`` figures fit an IEEE column at 8-pt text with no title inside, methods at one J
are offset, CD clique bars are distinct from the axis, and no PDF the suite writes has a Type 3
font (``pdffonts``, poppler-utils)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import reports.cd
import reports.plots
from benchmark.cli import main
from reports.figure_style import COLUMN_INCHES, PAPER, PAPER_FONT_PT
from reports.load import load_results
from reports_support import write_run

PDFFONTS = shutil.which("pdffonts")
needs_pdffonts = pytest.mark.skipif(PDFFONTS is None, reason="pdffonts (poppler-utils) is not installed")


def font_types(pdf: Path) -> list[str]:
    """The Type column of ``pdffonts PDF`` (e.g. "TrueType", "CID TrueType", "Type 3")."""
    lines = subprocess.run([PDFFONTS, str(pdf)], check=True, capture_output=True, text=True).stdout.splitlines()
    header, rule, *fonts = lines
    start = header.index("type")
    return [line[start:start + 17].strip() for line in fonts]


def page_width_pt(pdf: Path) -> float:
    info = subprocess.run(["pdfinfo", str(pdf)], check=True, capture_output=True, text=True).stdout
    size = next(line for line in info.splitlines() if line.startswith("Page size:"))
    return float(size.split()[2])


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for method, accs in (("vmfproto", (80.0, 82.0, 81.0)), ("protopnet", (78.0, 79.5, 77.0)), ("nppp", (75.0, 76.0, 74.0))):
        for j in (5, 10):
            for seed, acc in enumerate(accs):
                write_run(root, f"{method}{j}s{seed}", method=method, J=j, seed=seed,
                          metrics={"acc": acc + j / 10, "con": 50.0 + seed})
    return root


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    kept = []
    for module in (reports.plots, reports.cd):
        save = module.save_figure

        def keep(fig, out, save=save):
            kept.append(fig)
            save(fig, out)

        monkeypatch.setattr(module, "save_figure", keep)
    return kept


@needs_pdffonts
def test_no_pdf_has_a_type3_font_and_paper_figures_are_one_column_wide(
        runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    screen, paper, cd = tmp_path / "screen.pdf", tmp_path / "paper.pdf", tmp_path / "cd.pdf"
    assert main(["plot", str(runs), "--x", "J", "--hue", "method", "--out", str(screen)]) == 0
    assert main(["plot", str(runs), "--x", "J", "--hue", "method", "--style", "paper", "--out", str(paper)]) == 0
    caption = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("caption: "))
    assert caption.endswith("mean over seeds ± 1 sample s.d.; n = 3 seed(s) per point")
    assert main(["plot", "--cd", str(runs), "--style", "paper", "--out", str(cd)]) == 0
    for pdf in (screen, paper, cd):
        types = font_types(pdf)
        assert types and not [t for t in types if "Type 3" in t], (pdf.name, types)
    for pdf in (paper, cd):  # \columnwidth of IEEEtran: 3.5 in = 252 pt
        assert page_width_pt(pdf) == pytest.approx(COLUMN_INCHES * 72, abs=0.5)


def test_paper_style_sets_8pt_text_no_title_and_offsets_methods_at_one_j(
        runs: Path, tmp_path: Path, figures: list) -> None:
    series = reports.plots.plot_results(load_results([runs]), tmp_path / "p.png", x="J", y="acc", hue="method",
                                        style=PAPER)
    fig = figures[0]
    assert fig.get_figwidth() == pytest.approx(COLUMN_INCHES) and not fig.get_suptitle()
    ax = fig.axes[0]
    texts = [ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels(),
             *fig.legends[0].get_texts(), fig.legends[0].get_title()]
    assert {t.get_fontsize() for t in texts if t.get_text()} == {PAPER_FONT_PT}
    xs = [list(line.get_xdata()) for line in ax.lines if line.get_marker() == "o"]
    assert len(xs) == len(series) == 3
    at_five = sorted(x[0] for x in xs)  # the three methods at J = 5: side by side, near 5
    assert len(set(at_five)) == 3 and all(abs(x - 5) < 1.0 for x in at_five)


def test_cd_clique_bars_are_distinct_from_the_axis(runs: Path, tmp_path: Path, figures: list) -> None:
    reports.cd.plot_cd(load_results([runs]), tmp_path / "cd.png", metric="con", style=PAPER)  # con: all tied
    ax = figures[0].axes[0]
    collections = [c for c in ax.collections if len(c.get_segments()) == 1]
    axis = [c for c in collections if c.get_segments()[0][0][1] == 0 and c.get_segments()[0][1][1] == 0]
    bars = [c for c in collections if c.get_segments()[0][0][1] < -0.2]
    assert len(axis) == 1 and bars
    for bar in bars:
        assert tuple(bar.get_color()[0]) != tuple(axis[0].get_color()[0])
        assert bar.get_linewidth()[0] > 2 * axis[0].get_linewidth()[0]
