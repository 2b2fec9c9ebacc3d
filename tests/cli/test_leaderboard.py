"""``protobench leaderboard``: two labs' bundles (a folder and an archive) give a document that
validates against the schema written beside it, byte-identical on a second build; ties come from
the Holm-adjusted paired tests (statsmodels' Holm as the oracle); coverage gaps and differing
settings are shown, never merged; a changed byte, an unsafe archive, a link, a pickle, a newer
format, a duplicated run id with other content, a result its records contradict, an unwritable or
foreign --out are each refused before anything is written; HTML and formula cells are inert."""
from __future__ import annotations

import io
import json
import pickle
import tarfile
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from benchmark.bundle.make import make_bundle
from benchmark.bundle.manifest import write_manifest
from benchmark.cli import main
from leaderboard_runs import lab_run
from reports.load import load_results
from reports.paired import cell_difference


def _labs(root: Path) -> tuple[Path, Path]:
    """Lab A: vmfproto (good) and protopnet (worse), seeds 0–1, J=3; tesnet on J=3 only.
    Lab B: the same two methods on seeds 2–3, and vmfproto on J=5 only (a coverage gap)."""
    for seed, (good, worse) in enumerate([(85, 55), (80, 60), (83, 58), (78, 52)]):
        lab = root / ("A" if seed < 2 else "B")
        lab_run(lab, "vmfproto", seed, good)
        lab_run(lab, "protopnet", seed, worse)
    for seed in (0, 1):
        lab_run(root / "A", "tesnet", seed, 82 - 3 * seed, sta=60.0)
    lab_run(root / "B", "vmfproto", 2, 70, J=5)
    return root / "A", root / "B"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("labs")
    a, b = _labs(root)
    make_bundle([a], root / "labA")
    make_bundle([b], root / "labB")
    return root / "labA", root / "labB.tar.gz"


@pytest.fixture(scope="module")
def board(bundles: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("board") / "L"
    assert main(["leaderboard", str(bundles[0]), str(bundles[1]), "--out", str(out)]) == 0
    return out


def _document(out: Path) -> dict:
    return json.loads((out / "leaderboard.json").read_text())


def test_document_validates_and_a_second_build_is_byte_identical(bundles, board: Path, tmp_path: Path) -> None:
    document = _document(board)
    schema = json.loads((board / "leaderboard.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(document)
    assert document["$schema"] == "leaderboard.schema.json" and document["schema_version"] == 4
    again = tmp_path / "L2"
    assert main(["leaderboard", str(bundles[0]), str(bundles[1]), "--out", str(again)]) == 0
    names = sorted(p.relative_to(board).as_posix() for p in board.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(again).as_posix() for p in again.rglob("*") if p.is_file())
    assert {"leaderboard.csv", "leaderboard.md", "leaderboard.tex", "index.html", "eval.yaml"} <= set(names)
    for name in names:
        assert (board / name).read_bytes() == (again / name).read_bytes(), name
    assert main(["leaderboard", str(bundles[0]), str(bundles[1]), "--out", str(again)]) == 0  # replaces its own


def test_sources_are_verified_with_checksums_and_runs_pool_across_labs(board: Path) -> None:
    document = _document(board)
    assert [(s["name"], s["kind"], s["verification"], s["runs"]) for s in document["sources"]] == [
        ("labA", "bundle", "verified", 6), ("labB.tar.gz", "archive", "verified", 5)]
    assert all(len(s["checksum"]) == 64 for s in document["sources"])
    j3 = next(b for b in document["boards"] if b["J"] == 3)
    vmf = next(e for e in j3["entries"] if e["method"] == "vmfproto")
    assert vmf["seeds"] == [0, 1, 2, 3] and [s["name"] for s in vmf["sources"]] == ["labA", "labB.tar.gz"]
    assert vmf["verified"] and vmf["rescored"] and vmf["test_images"] == [60] and vmf["budget"] == "default"
    assert j3["missing_methods"] == [] and next(b for b in document["boards"] if b["J"] == 5)["missing_methods"] == [
        "protopnet", "tesnet"]
    assert {c["method"]: c["missing"] for c in document["coverage"]}["tesnet"] == ["synthbirds/dinov2_vits14/J=5"]


def test_ties_come_from_holm_adjusted_paired_tests(board: Path, bundles) -> None:
    document = _document(board)
    j3 = next(b for b in document["boards"] if b["J"] == 3)
    acc = next(r for r in j3["rankings"] if r["metric"] == "acc")["standings"]
    entries = {e["id"]: e for e in j3["entries"]}
    methods = [entries[s["entry"]]["method"] for s in acc]
    assert methods[0] == "vmfproto" and acc[0]["group"] == "best" and acc[0]["rank"] == 1
    # the oracle: compare's paired difference of each entry against the leader, statsmodels' Holm
    runs = load_results([bundles[0].parent / "A", bundles[0].parent / "B"])
    runs = runs[runs["J"] == 3]
    leader = runs[runs["method"] == "vmfproto"].set_index("seed")
    p = [cell_difference(runs[runs["method"] == m].set_index("seed"), leader, "acc", 0.95).p_value
         for m in methods[1:]]
    expected = multipletests(p, method="holm")[1]
    assert np.allclose([s["p_holm"] for s in acc[1:]], expected, rtol=1e-12)
    for standing, adjusted in zip(acc[1:], expected):
        assert standing["group"] == ("tied" if adjusted >= 0.05 else "below")
        assert standing["rank"] == (1 if adjusted >= 0.05 else 1 + sum(o["mean"] > standing["mean"] for o in acc))
    assert entries[acc[-1]["entry"]]["method"] == "protopnet" and acc[-1]["group"] == "below"


def test_tables_page_and_eval_yaml(board: Path) -> None:
    import yaml

    csv = (board / "leaderboard.csv").read_text()
    assert csv.splitlines()[0].startswith("board,dataset,backbone,J,metric,better,rank,group")
    assert "## synthbirds/dinov2_vits14/J=3" in (board / "leaderboard.md").read_text()
    tex = (board / "leaderboard.tex").read_text()
    assert tex.count(r"\begin{tabular}") == 4 and r"$\pm$" in tex and "\\_" in tex
    page = (board / "index.html").read_text()
    assert "http://" not in page and "https://" not in page and 'src="assets/site.js"' in page
    tasks = yaml.safe_load((board / "eval.yaml").read_text())["tasks"]
    assert {t["id"] for t in tasks} == {f"synthbirds-{m}" for m in ("acc", "con", "sta", "dis", "comp")}


def _copy_bundle(bundle: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(bundle, target)
    return target


def test_a_changed_byte_is_refused_by_name_unless_allowed(bundles, tmp_path: Path, capsys) -> None:
    tampered = _copy_bundle(bundles[0], tmp_path / "labT")
    result = next(tampered.rglob("result.json"))
    data = bytearray(result.read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\n")
    result.write_bytes(bytes(data))
    out = tmp_path / "L"
    assert main(["leaderboard", str(tampered), str(bundles[1]), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"bundle {tampered} FAILED verification" in err and not out.exists()
    assert main(["leaderboard", str(tampered), str(bundles[1]), "--out", str(out), "--allow-unverified"]) == 0
    document = _document(out)
    assert next(s for s in document["sources"] if s["name"] == "labT")["verification"].startswith("UNVERIFIED")
    marked = [e for b in document["boards"] for e in b["entries"] if any(s["name"] == "labT" for s in e["sources"])]
    assert marked and not any(e["verified"] for e in marked)
    assert "(unverified)" in (out / "leaderboard.md").read_text()


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def test_unsafe_archives_and_links_are_refused_before_anything_is_unpacked(bundles, tmp_path: Path, capsys) -> None:
    def member(name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
        return info, data if kind == tarfile.REGTYPE else None

    cases = {"traversal": [member("b/SHA256SUMS"), member("b/../../escaped.txt")],
             "absolute": [member("/tmp/absolute-protobench.txt")],
             "symlink": [member("b/SHA256SUMS"), member("b/key", kind=tarfile.SYMTYPE, link="/etc/passwd")],
             "hardlink": [member("b/SHA256SUMS"), member("b/key", kind=tarfile.LNKTYPE, link="/etc/passwd")]}
    for name, members in cases.items():
        archive = _archive(tmp_path / f"{name}.tar.gz", members)
        assert main(["leaderboard", str(archive), "--out", str(tmp_path / "L")]) == 2, name
        assert "refused" in capsys.readouterr().err, name
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "L").exists()
    linked = _copy_bundle(bundles[0], tmp_path / "linked")
    (linked / "lab" / "secret").symlink_to("/etc/hostname")
    assert main(["leaderboard", str(linked), "--out", str(tmp_path / "L"), "--allow-unverified"]) == 2
    assert "symbolic link" in capsys.readouterr().err


class _Bomb:
    def __reduce__(self):
        return (Path.write_text, (Path(_Bomb.marker), "pickle ran"))


def test_a_pickle_in_a_bundle_is_never_loaded(bundles, tmp_path: Path) -> None:
    bundle = _copy_bundle(bundles[0], tmp_path / "labP")
    _Bomb.marker = str(tmp_path / "pickle-ran")
    run = next(bundle.rglob("result.json")).parent
    (run / "checkpoint.pt").write_bytes(pickle.dumps(_Bomb()))
    (run / "per_image.pkl").write_bytes(pickle.dumps(_Bomb()))
    write_manifest(bundle)  # listed: the bundle verifies, and still nothing unpickles
    assert main(["leaderboard", str(bundle), "--out", str(tmp_path / "L")]) == 0
    assert not Path(_Bomb.marker).exists()


def test_hostile_names_are_escaped_in_the_page_and_inert_in_the_csv(tmp_path: Path) -> None:
    folder = lab_run(tmp_path / "H", "vmfproto", 0, 80)
    result = json.loads((folder / "result.json").read_text())
    result["method_display_name"] = '<script>alert("pwned")</script>'
    result["spec"]["variant"] = "=HYPERLINK(\"http://x\")"
    (folder / "result.json").write_text(json.dumps(result))
    out = tmp_path / "L"
    assert main(["leaderboard", str(tmp_path / "H"), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    cells = [c for line in (out / "leaderboard.csv").read_text().splitlines()[1:] for c in line.split(",")]
    assert not any(c.lstrip('"').startswith("=") for c in cells)
    assert "'=HYPERLINK" in (out / "leaderboard.csv").read_text()


def test_duplicate_run_ids_newer_formats_and_contradicted_results_are_refused(bundles, tmp_path: Path,
                                                                              capsys) -> None:
    same = tmp_path / "same"
    _copy_bundle(bundles[0], same)
    assert main(["leaderboard", str(bundles[0]), str(same), "--out", str(tmp_path / "L1")]) == 0  # one run, read once
    named = _document(tmp_path / "L1")["boards"][0]["entries"][0]["sources"]
    assert [s["name"] for s in named] == ["labA", "same"] and named[1]["verification"] == "verified"
    assert named[1]["checksum"] == named[0]["checksum"]  # the copy's own SHA256SUMS, the same bytes
    other = tmp_path / "other"
    folder = lab_run(other, "vmfproto", 0, 50)  # lab A's spec and seed, another result: a replication
    assert main(["leaderboard", str(bundles[0]), str(other), "--out", str(tmp_path / "L1b")]) == 0
    (entry,) = [e for e in _document(tmp_path / "L1b")["boards"][0]["entries"] if e["method"] == "vmfproto"]
    assert [(r["source"], r["seed"]) for r in entry["replicates"]] == [("labA", 0), ("labA", 1), ("other", 0)]
    twice = _copy_bundle(other, tmp_path / "twice")  # one source holding one run id twice, other content
    lab_run(twice / "copy", "vmfproto", 0, 40)
    assert main(["leaderboard", str(twice), "--out", str(tmp_path / "L2")]) == 2
    assert "holds run" in capsys.readouterr().err
    newer = _copy_bundle(bundles[0], tmp_path / "newer")
    (newer / "bundle.json").write_text(json.dumps({"format": "protobench-bundle", "version": 99}))
    write_manifest(newer)
    assert main(["leaderboard", str(newer), "--out", str(tmp_path / "L3")]) == 2
    assert "format version 99" in capsys.readouterr().err
    result = json.loads((folder / "result.json").read_text())
    result["metrics"]["acc"] = 99.0  # the records say 50
    (folder / "result.json").write_text(json.dumps(result))
    assert main(["leaderboard", str(other), "--out", str(tmp_path / "L4")]) == 2
    assert "its records give 50.0" in capsys.readouterr().err
    for name in ("L2", "L3", "L4"):
        assert not (tmp_path / name).exists()


def test_bad_sources_and_outs_are_refused_before_any_work(bundles, tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["leaderboard", str(tmp_path / "empty"), "--out", str(tmp_path / "L")]) == 2
    assert "is neither a bundle" in capsys.readouterr().err
    (tmp_path / "file").write_text("not a folder")
    assert main(["leaderboard", str(bundles[0]), "--out", str(tmp_path / "file" / "L")]) == 2
    assert "cannot be written" in capsys.readouterr().err
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("keep me")
    assert main(["leaderboard", str(bundles[0]), "--out", str(foreign)]) == 2
    assert "did not write" in capsys.readouterr().err and (foreign / "thesis.tex").read_text() == "keep me"


def test_differing_settings_become_separate_named_entries(tmp_path: Path) -> None:
    lab_run(tmp_path / "A", "vmfproto", 0, 80)
    changed = lab_run(tmp_path / "B", "vmfproto", 1, 70)
    result = json.loads((changed / "result.json").read_text())
    result["method_hyperparameters"]["tau"] = 0.25
    (changed / "result.json").write_text(json.dumps(result))
    out = tmp_path / "L"
    assert main(["leaderboard", str(tmp_path / "A"), str(tmp_path / "B"), "--out", str(out)]) == 0
    entries = _document(out)["boards"][0]["entries"]
    assert len(entries) == 2
    assert sorted(e["differs"] for e in entries) == [["method_args.tau = 0.25"], ["method_args.tau = 0.5"]]


def _hub_cache(cache: Path, repo: str, bundle: Path, commit: str = "a" * 40) -> None:
    """``bundle`` laid out as huggingface_hub's cache holds a downloaded model repository:
    refs/main names the commit, snapshots/COMMIT/* link into blobs/."""
    import hashlib

    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        blob = folder / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(path.read_bytes())
        link = folder / "snapshots" / commit / path.relative_to(bundle)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (len(path.relative_to(bundle).parts) + 1)) / "blobs" / blob.name)
    (folder / "snapshots" / commit / ".gitattributes").write_text("*.parquet filter=lfs\n")


@pytest.fixture()
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_hub_sources_and_bundle_pull_read_the_snapshot_layout(bundles, offline_hub: Path, tmp_path: Path,
                                                               capsys) -> None:
    _hub_cache(offline_hub, "lab-a/results", bundles[0])
    out = tmp_path / "L"
    assert main(["leaderboard", "hf:lab-a/results", str(bundles[1]), "--out", str(out)]) == 0
    names = [s["name"] for s in _document(out)["sources"]]
    assert names == [f"hf:lab-a/results@{'a' * 40}", "labB.tar.gz"]
    pulled = tmp_path / "pulled"
    assert main(["bundle", "pull", "lab-a/results", "--out", str(pulled)]) == 0
    assert main(["bundle", "verify", str(pulled)]) == 0 and not any(p.is_symlink() for p in pulled.rglob("*"))
    capsys.readouterr()
    snapshot = next((offline_hub / "models--lab-a--results" / "snapshots").iterdir())
    (snapshot / "lab" / "leak").symlink_to("/etc/hostname")
    assert main(["bundle", "pull", "lab-a/results", "--out", str(tmp_path / "pulled2")]) == 2
    assert "links outside" in capsys.readouterr().err and not (tmp_path / "pulled2").exists()


def test_the_site_links_the_leaderboard(board: Path, bundles, tmp_path: Path) -> None:
    site = tmp_path / "site"
    assert main(["site", str(bundles[0]), "--out", str(site), "--leaderboard", str(board)]) == 0
    assert 'href="leaderboard.html"' in (site / "index.html").read_text()
    shown = (site / "leaderboard.html").read_text()
    assert "synthbirds/dinov2_vits14/J=3" in shown and 'data-figure="dots-synthbirds/dinov2_vits14/J=3"' in shown
    assert 'src="assets/plotly.min.js"' in shown and (site / "assets" / "plotly.min.js").is_file()
    crafted = tmp_path / "crafted"
    crafted.mkdir()
    (crafted / "leaderboard.json").write_text(json.dumps({"$schema": "x"}))
    assert main(["site", str(bundles[0]), "--out", str(tmp_path / "s2"), "--leaderboard", str(crafted)]) == 2


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium at /usr/bin/chromium (apt-get install "
                    "chromium; .ci/run installs it)")
def test_headless_chromium_renders_the_page_offline_without_console_messages(board: Path, tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update",
                           "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
                           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000", "--dump-dom",
                           (board / "index.html").as_uri()], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "synthbirds/dinov2_vits14/J=3" in done.stdout and "<table" in done.stdout
    boards = len(json.loads((board / "leaderboard.json").read_text())["boards"])
    assert done.stdout.count("js-plotly-plot") >= boards and "main-svg" in done.stdout  # each board's figure drawn
    assert "CONSOLE" not in done.stderr, [line for line in done.stderr.splitlines() if "CONSOLE" in line]


def test_sources_beyond_the_bounds_are_refused(bundles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys) -> None:
    import benchmark.bundle.limits as limits

    monkeypatch.setattr(limits, "MAX_FILES", 3)
    for source in bundles:  # a folder, and an archive before anything of it is unpacked
        assert main(["leaderboard", str(source), "--out", str(tmp_path / "L")]) == 2
        assert "exceeds a leaderboard's bounds" in capsys.readouterr().err
    monkeypatch.setattr(limits, "MAX_FILES", 200_000)
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 100)
    assert main(["leaderboard", str(bundles[1]), "--out", str(tmp_path / "L")]) == 2
    assert "exceeds a leaderboard's bounds" in capsys.readouterr().err and not (tmp_path / "L").exists()
