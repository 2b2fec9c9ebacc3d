"""``protobench leaderboard`` on reliability round 6's cases: a verified bundle is read whole or
refused by name (a NaN, ±Infinity, 1e999, 100,000-deep, 5,000-digit or non-UTF-8 result.json,
re-hashed, each refused with rc 2 and nothing written; --allow-unverified lists it with the run
marked); every run of a verified source is in its entry; two labs' independent runs of one grid
are two replicates (source, seed) with the between-lab check (scipy's one-way ANOVA as the
oracle); hostile labels are escaped in markdown, LaTeX (no blank line inside a tabular, every
special character escaped, and it compiles where pdflatex is installed), HTML and YAML."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from scipy import stats

from benchmark.bundle.make import make_bundle
from benchmark.bundle.manifest import write_manifest
from benchmark.cli import main
from leaderboard_runs import lab_run

HOSTILE = ("<script>alert(1)</script><img src=x onerror=alert(2)><svg onload=alert(3)>\n\nrow\r\nbreak "
           "\u202eevil\u2066 & 50% $x$ #1 a_b {c} ~ ^ \\end{tabular} | `code` [link](javascript:x) κ 日本 🐦")
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _lab(root: Path, accuracies: tuple[int, ...], noise: int) -> Path:
    """vmfproto and protopnet (20 points worse) on seeds 0.. with these accuracies."""
    for seed, accuracy in enumerate(accuracies):
        lab_run(root, "vmfproto", seed, accuracy, noise=noise)
        lab_run(root, "protopnet", seed, accuracy - 20, noise=noise)
    return root


@pytest.fixture(scope="module")
def lab_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("round6")
    make_bundle([_lab(root / "A", (85, 80), noise=0)], root / "labA")
    return root / "labA"


def _document(out: Path) -> dict:
    return json.loads((out / "leaderboard.json").read_text())


def _seed_one(bundle: Path) -> Path:
    return next(p for p in sorted(bundle.glob("lab/*/result.json"))
                if json.loads(p.read_text())["spec"]["seed"] == 1 and "vmfproto" in p.read_text())


DAMAGES = {
    "NaN": lambda text: text.replace('"acc": ', '"acc": NaN, "was": ', 1),
    "Infinity": lambda text: text.replace('"acc": ', '"acc": -Infinity, "was": ', 1),
    "1e999": lambda text: text.replace('"acc": ', '"acc": 1e999, "was": ', 1),
    "nested 100,000 deep": lambda text: text.replace('"metrics": ', '"deep": ' + "[" * 100_000 + "]" * 100_000
                                                     + ', "metrics": ', 1),
    "a 5,000-digit integer": lambda text: text.replace('"seed": 1', '"seed": ' + "1" * 5000, 1),
    "not UTF-8": None,
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_verified_bundle_with_one_unreadable_run_is_refused_by_name_with_nothing_written(
        lab_a: Path, damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = Path(shutil.copytree(lab_a, tmp_path / "labA"))
    target = _seed_one(bundle)
    run = target.parent.relative_to(bundle).as_posix()
    edit = DAMAGES[damage]
    if edit is None:
        target.write_bytes(target.read_bytes().replace(b'"vmfproto"', b'"vmf\xffproto"', 1))
    else:
        target.write_text(edit(target.read_text()))
    write_manifest(bundle)  # re-hashed: the bundle verifies
    assert main(["bundle", "verify", str(bundle)]) == 0
    capsys.readouterr()
    out = tmp_path / "L"
    assert main(["leaderboard", str(bundle), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"source labA is verified, but 1 of its 4 run(s) cannot be read whole: {run}: " in err, err
    assert "read whole or not at all" in err and "--allow-unverified" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".L*"))  # nothing written, no staging left

    assert main(["leaderboard", str(bundle), "--out", str(out), "--allow-unverified"]) == 0
    err = capsys.readouterr().err
    assert f"note: source labA: run {run} cannot be read" in err
    document = _document(out)
    (source,) = document["sources"]
    assert source["verification"].startswith("UNVERIFIED: 1 run(s) cannot be read") and source["runs"] == 3
    assert [u["run"] for u in source["unreadable"]] == [run]
    vmf = next(e for e in document["boards"][0]["entries"] if e["method"] == "vmfproto")
    assert vmf["seeds"] == [0] and not vmf["verified"]  # the seeds of the runs read, marked
    assert run in (out / "leaderboard.md").read_text() and run in (out / "index.html").read_text()


def test_every_run_of_a_verified_source_is_in_its_entry(lab_a: Path, tmp_path: Path) -> None:
    other = tmp_path / "B"
    make_bundle([_lab(tmp_path / "runsB", (84, 79, 82), noise=5)], other)
    assert main(["leaderboard", str(lab_a), str(other), "--out", str(tmp_path / "L")]) == 0
    document = _document(tmp_path / "L")
    listed = {(r["source"], r["run"]) for b in document["boards"] for e in b["entries"] for r in e["replicates"]}
    for bundle in (lab_a, other):
        runs = {(bundle.name, p.parent.relative_to(bundle).as_posix()) for p in bundle.rglob("result.json")}
        assert runs and runs <= listed, runs - listed
    assert {s["name"]: s["runs"] for s in document["sources"]} == {"labA": 4, "B": 6}
    for board in document["boards"]:
        for entry in board["entries"]:
            assert entry["seeds"] == sorted(r["seed"] for r in entry["replicates"])


def test_a_run_folder_without_its_result_in_a_bundle_is_refused(lab_a: Path, tmp_path: Path, capsys) -> None:
    bundle = Path(shutil.copytree(lab_a, tmp_path / "labA"))
    target = _seed_one(bundle)
    target.unlink()
    write_manifest(bundle)
    assert main(["leaderboard", str(bundle), "--out", str(tmp_path / "L")]) == 2
    assert f"{target.parent.relative_to(bundle).as_posix()}: a run folder with records but no result.json" in \
        capsys.readouterr().err
    moved = Path(shutil.copytree(lab_a, tmp_path / "moved"))  # a result at another run's folder
    first, second = sorted(moved.glob("lab/*/result.json"))[:2]
    first.write_bytes(second.read_bytes())
    write_manifest(moved)
    assert main(["leaderboard", str(moved), "--out", str(tmp_path / "L")]) == 2
    assert "not the folder it lies in" in capsys.readouterr().err
    assert not (tmp_path / "L").exists()


def test_two_labs_runs_of_one_grid_are_replicates_with_the_between_lab_check(lab_a: Path, tmp_path: Path) -> None:
    make_bundle([_lab(tmp_path / "B", (84, 81), noise=7)], tmp_path / "labB")  # the same run ids, other content
    ids_a = sorted(p.parent.name for p in lab_a.glob("lab/*/result.json"))
    assert ids_a == sorted(p.parent.name for p in (tmp_path / "labB").glob("lab/*/result.json"))
    out = tmp_path / "L"
    assert main(["leaderboard", str(lab_a), str(tmp_path / "labB"), "--out", str(out)]) == 0
    document = _document(out)
    (board,) = document["boards"]
    vmf = next(e for e in board["entries"] if e["method"] == "vmfproto")
    assert [(r["source"], r["seed"]) for r in vmf["replicates"]] == [("labA", 0), ("labA", 1), ("labB", 0), ("labB", 1)]
    assert vmf["seeds"] == [0, 0, 1, 1] and [s["name"] for s in vmf["sources"]] == ["labA", "labB"]
    acc = next(r for r in board["rankings"] if r["metric"] == "acc")
    standing = {s["entry"]: s for s in acc["standings"]}
    mine = standing[vmf["id"]]
    values = {lab: [json.loads(p.read_text())["metrics"]["acc"] for p in sorted(root.glob("lab/*/result.json"))
                    if "vmfproto" in p.read_text()] for lab, root in (("labA", lab_a), ("labB", tmp_path / "labB"))}
    oracle = stats.f_oneway(values["labA"], values["labB"])
    check = mine["between_labs"]
    assert check["test"].startswith("one-way ANOVA F test of the source") and "F(1, 2) over 4 runs from 2 sources" \
        in check["test"]
    assert (check["n_runs"], check["n_sources"], check["df_between"], check["df_within"]) == (4, 2, 1, 2)
    assert check["statistic"] == pytest.approx(oracle.statistic) and check["p"] == pytest.approx(oracle.pvalue)
    assert [(x["source"], x["n_seeds"]) for x in mine["per_source"]] == [("labA", 2), ("labB", 2)]
    assert mine["per_source"][0]["mean"] == pytest.approx(sum(values["labA"]) / 2)
    assert mine["n_seeds"] == 4
    other = next(s for s in acc["standings"] if s["entry"] != vmf["id"])  # paired on (source, seed): 4 pairs
    assert "4" in other["test"] and other["group"] in ("below", "tied")
    assert "Between labs" in (out / "leaderboard.md").read_text()
    assert "between_labs_p" in (out / "leaderboard.csv").read_text().splitlines()[0]


def _hostile_bundle(root: Path) -> Path:
    for seed in (0, 1):
        folder = lab_run(root / "A", "vmfproto", seed, 80 - 5 * seed)
        result = json.loads((folder / "result.json").read_text())
        result["method_display_name"] = HOSTILE
        result["spec"]["dataset"] = "birds\n\n\u202e<b>x</b>"
        (folder / "result.json").write_text(json.dumps(result))
    make_bundle([root / "A"], root / "labA")
    return root / "labA"


#: what may stand for a character in the LaTeX of a label (benchmark/escaping.py): a special
#: character's command, an accent on a letter, a letter of OT1, a Greek math symbol
_LATEX_ESCAPES = re.compile(r"\\[&%$#_{}]|\\text(?:backslash|asciitilde|asciicircum|less|greater|bar)\{\}"
                            r"|\\[`'^\"~=.uvHrc]\{\\?[A-Za-z]\}|\\(?:ss|ae|AE|oe|OE|o|O|l|L|i)\{\}"
                            r"|\\ensuremath\{\\?[A-Za-z^\\]+\}")


def _unescaped_latex(cell: str) -> str:
    """What is left of a label's LaTeX once every allowed escape is removed: must hold no special."""
    return "".join(c for c in _LATEX_ESCAPES.sub("", cell) if c in "\\&%$#_{}~^")


def test_hostile_labels_are_escaped_in_every_format_and_the_latex_compiles(tmp_path: Path) -> None:
    out = tmp_path / "L"
    assert main(["leaderboard", str(_hostile_bundle(tmp_path)), "--out", str(out)]) == 0
    md = (out / "leaderboard.md").read_text()
    for raw in ("<script>", "<img", "<svg"):
        assert raw not in md
    assert not re.search(r"(?<!\\)\]\(javascript", md) and r"\[link\](javascript" in md  # no link
    assert not set(BIDI) & set(md) and "\r" not in md
    tables = [[line for line in block.splitlines() if line.startswith("|")] for block in md.split("\n\n")]
    board_table, intervals = [t for t in tables if t]
    borders = [re.sub(r"\\.", "", line).count("|") for line in board_table]  # an escape pair is no border
    assert len(board_table) == 3 and borders == [8, 8, 8], borders  # header, rule, one row of 7 cells
    borders = [re.sub(r"\\.", "", line).count("|") for line in intervals]
    assert len(intervals) == 2 + 3 and set(borders) == {7}, borders  # a row per metric (acc, con, sta) of 6 cells
    assert re.search(r"^## birds\s+&lt;b&gt;x&lt;/b&gt;/dinov2_vits14/J=3$", md, re.M)

    tex = (out / "leaderboard.tex").read_text()
    assert not set(BIDI) & set(tex)
    for body in re.findall(r"\\midrule\n(.*?)\\bottomrule", tex, re.S):
        lines = body.split("\n")[:-1]
        assert lines and all(line.endswith(r" \\") and line.strip() for line in lines), lines  # no blank line
        for line in lines:
            label = line.split(" & ")[0]
            assert _unescaped_latex(label) == "", label
    caption = re.search(r"\\caption\{(.*)\}", tex).group(1)
    assert _unescaped_latex(caption.removeprefix("Leaderboard: ").removesuffix(".")) == ""

    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and not set(BIDI) & set(page)
    hub = (out / "eval.yaml").read_text()
    assert not set(BIDI) & set(hub) and all("\n" not in t["id"] for t in yaml.safe_load(hub)["tasks"])
    card = (tmp_path / "labA" / "README.md").read_text()
    assert "<script>" not in card and not set(BIDI) & set(card)
    _compile(tex, tmp_path)


def test_the_latex_structural_check_catches_what_it_guards() -> None:
    """The check above cannot pass open: raw specials and a blank line are found."""
    assert _unescaped_latex("a & b") == "&" and _unescaped_latex(r"\textbf{x}") == "\\{}"
    assert _unescaped_latex(r"a \& b \textbackslash{} \'{e} \ensuremath{\kappa} 50\%") == ""


def _compile(tex: str, where: Path) -> None:
    pdflatex = shutil.which("pdflatex")
    if pdflatex is None:
        pytest.skip("pdflatex is not installed (apt-get install texlive-latex-base texlive-latex-recommended); "
                    "the structural checks above ran")
    document = where / "doc.tex"
    document.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n" + tex +
                        "\\end{document}\n", encoding="utf-8")
    done = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", document.name],
                          cwd=where, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (where / "doc.pdf").stat().st_size > 0
