"""What a reviewer reads on the leaderboard (issue 54): each entry's interval with its n and its
difference to the leader with that difference's interval and Holm p, in leaderboard.json, the
page, leaderboard.md and the LaTeX (``compare``'s paired procedure ``cell_difference`` and
statsmodels' Holm as the oracles); the line saying what "verified" covers and what is trusted;
each entry's method provider and version; a dot-and-interval figure per board drawn offline with
the site's Plotly; and a folder that holds bundles refused by name with nothing written."""
from __future__ import annotations

import csv
import io
import json
import re
import shutil
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from benchmark.bundle.format import BUNDLE_FILE
from benchmark.bundle.make import make_bundle
from benchmark.bundle.manifest import MANIFEST_FILE
from benchmark.cli import main
from leaderboard_runs import lab_run
from reports.leaderboard.tables import interval_text
from reports.load import load_results
from reports.paired import cell_difference

REPO = Path(__file__).resolve().parents[2]
PLUGIN = {"distribution": "protobench-mylab", "version": "0.1.0"}
METHODS = ("vmfproto", "tesnet", "protopnet")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vmfproto (the leader, suite's own), tesnet (close; a plugin's provider recorded) and
    protopnet (far below; no provider recorded), seeds 0–2, one lab."""
    root = tmp_path_factory.mktemp("reviewer")
    for seed, good in enumerate((85, 80, 83)):
        lab_run(root / "A", "vmfproto", seed, good)
        lab_run(root / "A", "tesnet", seed, good - 3, provider=PLUGIN)
        lab_run(root / "A", "protopnet", seed, good - 30, provider=None)
    make_bundle([root / "A"], root / "labA")
    return root


@pytest.fixture(scope="module")
def board(lab: Path) -> Path:
    out = lab / "L"
    assert main(["leaderboard", str(lab / "labA"), "--out", str(out)]) == 0
    return out


def _document(out: Path) -> dict:
    return json.loads((out / "leaderboard.json").read_text())


def _accuracy(document: dict) -> tuple[list[dict], dict[str, dict]]:
    only = document["boards"][0]
    acc = next(r["standings"] for r in only["rankings"] if r["metric"] == "acc")
    return acc, {e["id"]: e for e in only["entries"]}


def test_each_difference_to_the_leader_keeps_its_interval_and_holm_p(lab: Path, board: Path) -> None:
    acc, entries = _accuracy(_document(board))
    assert [entries[s["entry"]]["method"] for s in acc] == list(METHODS)
    runs = load_results([lab / "A"])
    leader = runs[runs["method"] == "vmfproto"].set_index("seed")
    found = [cell_difference(runs[runs["method"] == m].set_index("seed"), leader, "acc", 0.95) for m in METHODS[1:]]
    holm = multipletests([f.p_value for f in found], method="holm")[1]
    for standing, oracle, adjusted in zip(acc[1:], found, holm):
        assert oracle.has_interval
        assert np.allclose([standing["difference_to_best"], standing["difference_ci_low"],
                            standing["difference_ci_high"]], [oracle.difference, *oracle.ci], rtol=1e-12)
        assert standing["p_holm"] == pytest.approx(adjusted, rel=1e-12) and standing["test"] == oracle.test
    leader_standing = acc[0]
    assert leader_standing["group"] == "best" and leader_standing["difference_ci_low"] is None
    for standing in acc:  # the entry's own interval: three replicates × the 60 test images
        assert standing["ci_n"] == 3 and standing["ci_images"] == 60
        assert standing["ci_low"] < standing["mean"] < standing["ci_high"]


def _difference(standing: dict) -> str:
    return (f"{standing['difference_to_best']:+.1f} [{standing['difference_ci_low']:.1f}, "
            f"{standing['difference_ci_high']:.1f}]")


def test_the_page_markdown_and_latex_show_each_interval_with_n_and_each_difference(board: Path) -> None:
    acc, _ = _accuracy(_document(board))
    md = (board / "leaderboard.md").read_text()
    page = (board / "index.html").read_text()
    tex = (board / "leaderboard.tex").read_text()
    md_rows = [line for line in md.splitlines() if line.startswith("| acc ")]
    tex_rows = [line for line in tex.splitlines() if line.startswith(r"acc \ensuremath{\uparrow} & ")]
    assert len(md_rows) == len(tex_rows) == len(acc)
    for standing, md_row, tex_row in zip(acc, md_rows, tex_rows):
        own = f"{standing['mean']:.1f} [{standing['ci_low']:.1f}, {standing['ci_high']:.1f}] (n = 3 × 60 images)"
        assert own == f"{standing['mean']:.1f} {interval_text(standing, 'acc')}"
        assert md_row.replace("\\[", "[").replace("\\]", "]").count(own) == 1, md_row
        assert own.replace("×", r"\ensuremath{\times}") in tex_row, tex_row
        assert own in page
        if standing["group"] == "best":
            assert "the leader" in md_row and "the leader" in tex_row
            continue
        holm = f"{standing['p_holm']:.3g}"
        for text in (md_row.replace("\\[", "[").replace("\\]", "]"), tex_row):
            assert _difference(standing) in text and f" {holm} " in text.replace("|", " ").replace("&", " ")
        assert f"<td>{_difference(standing)}</td><td>{holm}</td>" in page


def test_a_line_under_the_title_says_what_is_verified_and_what_is_trusted(board: Path) -> None:
    document = _document(board)
    scope = document["settings"]["verification"]
    assert "SHA256SUMS" in scope and "re-computed from the run's per-image" in scope
    assert "Trusted: that training followed the spec, the records themselves, and the devices" in scope
    guide = document["settings"]["guide"]
    assert (REPO / guide).is_file()
    md = (board / "leaderboard.md").read_text().splitlines()
    assert md[0] == "# Leaderboard" and md[2].startswith("Verified: every file") and f"`{guide}`" in md[2]
    tex = (board / "leaderboard.tex").read_text().splitlines()
    assert tex[1].startswith("% Verified: every file") and guide.replace("_", "\\_") in tex[1]
    page = (board / "index.html").read_text()
    title = page.index("<h1>protobench leaderboard</h1>")
    line = re.search(r'<p class="verification">(.*?)</p>', page)
    assert line and line.start() > title and page.index("<h2>") > line.start()
    assert "Trusted:" in line.group(1) and f"<code>{guide}</code>" in line.group(1)


def test_each_entry_names_its_method_provider_and_version(board: Path) -> None:
    document = _document(board)
    _, entries = _accuracy(document)
    providers = {e["method"]: e["method_providers"] for e in entries.values()}
    assert providers == {"vmfproto": [{"distribution": "protobench", "version": version("protobench")}],
                         "tesnet": [PLUGIN], "protopnet": [{"distribution": None, "version": None}]}
    shown = {"vmfproto": f"protobench {version('protobench')}", "tesnet": "protobench-mylab 0.1.0",
             "protopnet": "not recorded (an import-path method or an earlier result)"}
    rows = list(csv.DictReader(io.StringIO((board / "leaderboard.csv").read_text())))
    assert {r["method"]: r["method_provider"] for r in rows} == shown
    md = (board / "leaderboard.md").read_text()
    page = (board / "index.html").read_text()
    for method, text in shown.items():
        label = next(e["label"] for e in entries.values() if e["method"] == method)
        assert re.search(rf"^\| {re.escape(label)}\s+\| {re.escape(text)}\s+\|", md, re.M), (method, md)
        assert f"<td>{label}</td><td>{text}</td>" in page


def _figure(page: str, board_id: str) -> dict:
    data = re.search(rf'<script type="application/json" data-figure="dots-{re.escape(board_id)}">(.*?)</script>',
                     page)
    assert data, "no dot-and-interval figure"
    return json.loads(data.group(1))


def test_a_dot_and_interval_figure_per_board_drawn_offline(board: Path) -> None:
    document = _document(board)
    page = (board / "index.html").read_text()
    assert "http://" not in page and "https://" not in page
    assert 'src="assets/plotly.min.js"' in page and (board / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    only = document["boards"][0]
    labels = {e["id"]: e["label"] for e in only["entries"]}
    figure = _figure(page, only["id"])
    assert [t["name"] for t in figure["data"]] == [r["metric"] for r in only["rankings"]]
    for trace, ranking in zip(figure["data"], only["rankings"]):
        standings = ranking["standings"]
        assert trace["y"] == [labels[s["entry"]] for s in standings]
        assert np.allclose(trace["x"], [s["mean"] for s in standings])
        lows = np.array(trace["x"]) - np.array(trace["error_x"]["arrayminus"])
        highs = np.array(trace["x"]) + np.array(trace["error_x"]["array"])
        for low, high, standing in zip(lows, highs, standings):  # no interval (con: no spread): a bare dot
            expected = (standing["ci_low"], standing["ci_high"]) if standing["ci_low"] is not None else \
                (standing["mean"], standing["mean"])
            assert np.allclose([low, high], expected)
        assert trace["marker"]["symbol"] == ["star" if s["group"] == "best" else "circle" for s in standings]
        assert trace["marker"]["symbol"].count("star") == 1
    with_interval = [s for r in only["rankings"] for s in r["standings"] if s["ci_low"] is not None]
    assert len(with_interval) >= 6  # acc and sta of every entry


def test_a_folder_that_holds_bundles_is_refused_by_name_with_nothing_written(
        lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = tmp_path / "all-labs"
    parent.mkdir()
    shutil.copytree(lab / "labA", parent / "labA")
    shutil.copytree(lab / "labA", parent / "nested" / "labB")
    out = tmp_path / "L"
    assert main(["leaderboard", str(parent), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds 2 bundle(s) (labA, nested/labB)" in err and "give each bundle as its own SOURCE" in err
    assert "Traceback" not in err and not out.exists()
    # the advice works: each bundle verified on its own (byte-identical copies: one run credited to both)
    assert main(["leaderboard", str(parent / "labA"), str(parent / "nested" / "labB"), "--out", str(out)]) == 0
    assert [s["verification"] for s in _document(out)["sources"]] == ["verified", "verified"]


def test_a_bundle_that_lost_its_manifest_is_refused_not_read_as_a_runs_folder(
        lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = Path(shutil.copytree(lab / "labA", tmp_path / "labA"))
    assert (bundle / BUNDLE_FILE).is_file()
    (bundle / MANIFEST_FILE).unlink()
    out = tmp_path / "L"
    assert main(["leaderboard", str(bundle), "--out", str(out)]) == 2
    assert f"FAILED verification against its {MANIFEST_FILE}" in capsys.readouterr().err and not out.exists()
