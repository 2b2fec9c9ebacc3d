"""``protobench site``: every page and download from the same loader as ``report``, every data
string escaped (a display name holding a script element yields no script element), no formula
cell in a CSV, each run a page, and a rebuild byte-identical but for the build timestamp."""
from __future__ import annotations

import csv
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.run.identity import mark_stale
from reports.load import load_runs
from reports.per_image import PER_IMAGE_METRICS
from reports.site.build import build_site
from site_support import HOSTILE_NAME, RICH_RUN, site_runs


class Elements(HTMLParser):
    """Counts start tags and collects script elements' attributes and local links."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script":
            self.scripts.append(named)
        for attr in ("href", "src"):
            if named.get(attr):
                self.links.append(str(named[attr]))


def parse(path: Path) -> Elements:
    parser = Elements()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return site_runs(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def site(runs: Path) -> Path:
    out = runs.parent / "site"
    build_site(mark_stale(load_runs([runs], csv=False)), out, built="2026-01-01 00:00:00 UTC")
    return out


def test_every_run_has_a_page_and_the_site_has_its_parts(runs: Path, site: Path) -> None:
    results = list(runs.rglob("result.json"))
    assert len(list((site / "runs").glob("*.html"))) == len(results)
    for name in ("index.html", "runs.html", "compare-method.html", "overview.csv", "overview.parquet", "table.csv",
                 "table.tex", "assets/plotly.min.js", "assets/site.js", "assets/site.css"):
        assert (site / name).is_file(), name
    rich = (site / "runs" / f"{'-'.join(RICH_RUN)}.html").read_text()
    assert 'data-figure="curves"' in rich and 'data-figure="per-image"' in rich and "<img src=" in rich


def test_no_page_loads_anything_from_the_network_and_every_local_link_exists(site: Path) -> None:
    for page in site.rglob("*.html"):
        for link in parse(page).links:
            assert not re.match(r"^[a-z]+:", link), f"{page.name} loads {link}"
            assert (page.parent / link.split("#")[0]).exists(), f"{page.name} links the missing {link}"


def test_a_hostile_display_name_yields_no_script_element(site: Path) -> None:
    pages = [site / "index.html", site / "runs.html", site / "runs" / "hostile-0123456789ab.html"]
    for page in pages:
        text = page.read_text()
        scripts = parse(page).scripts
        assert all(s.get("src", "").endswith((".js")) or s.get("type") == "application/json" for s in scripts), page
        assert "pwned" not in "".join(str(s) for s in scripts)
        assert "<script>alert" not in text
    assert "&lt;script&gt;alert(&quot;pwned&quot;)" in (site / "runs.html").read_text()


def test_no_csv_cell_is_a_formula(site: Path) -> None:
    for name in ("overview.csv", "table.csv", "compare-method.csv"):
        cells = [c for row in csv.reader(io.StringIO((site / name).read_text())) for c in row]
        formulas = [c for c in cells if c[:1] in ("=", "+", "@") or (c[:1] == "-" and not re.match(r"^-[\d.]", c))]
        assert not formulas, (name, formulas[:3])
    assert any(HOSTILE_NAME in c for row in csv.reader(io.StringIO((site / "overview.csv").read_text())) for c in row)


def test_a_rebuild_is_byte_identical_but_the_timestamp(runs: Path, site: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    build_site(mark_stale(load_runs([runs], csv=False)), again, built="2027-06-30 12:00:00 UTC")
    first = {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    second = {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()}
    assert first.keys() == second.keys()
    differ = sorted(name for name in first if first[name] != second[name])
    assert differ == [Path(".protobench-site"), Path("index.html")]  # the marker lists index.html's hash
    assert first[Path("index.html")].replace(b"2026-01-01 00:00:00", b"2027-06-30 12:00:00") == second[Path("index.html")]


def test_overview_rows_are_the_reports_cells(runs: Path, site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(csv.DictReader(io.StringIO((site / "overview.csv").read_text())))
    frame = load_runs([runs], csv=False)
    acc = frame[(frame["grid"] == "cub_main") & frame["acc"].notna()]
    for _, run in acc.iterrows():
        matching = [r for r in rows if r["metric"] == "acc" and r["dataset"] == run["dataset"]
                    and r["backbone"] == run["backbone"] and r["J"] == str(run["J"]) and r["variant"] == run["variant"]]
        assert matching and any(abs(float(r["mean"]) - run["acc"]) < 1e-9 or int(r["n"]) > 1 for r in matching)
    assert main(["site", str(runs), "--out", str(site.parent / "cli-site")]) == 0
    assert "page(s)" in capsys.readouterr().out


def test_site_refuses_a_foreign_folder(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    assert main(["site", str(runs), "--out", str(tmp_path)]) == 2
    assert "mine.txt) that protobench did not write there" in capsys.readouterr().err and (tmp_path / "mine.txt").exists()


def test_site_builder_never_loads_torch(runs: Path, tmp_path: Path) -> None:
    """The site is the reports floor's: loading the runs and building the site imports no torch
    (the command's stale check, which asks the method code, is the CLI face's)."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    script = ("import sys\nfrom pathlib import Path\n"
              "from reports.load import load_runs\nfrom reports.site.build import build_site\n"
              f"build_site(load_runs([{str(runs)!r}], csv=False), Path({str(tmp_path / 'site')!r}))\n"
              "assert 'torch' not in sys.modules, 'torch was loaded'\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_a_site_of_runs_without_any_interval(runs: Path, tmp_path: Path) -> None:
    """One run per cell: no interval over seeds; the metrics with per-image records get theirs over the
    test images (one seed: Student t over the images), the one policy of report --ci."""
    built = build_site(load_runs([runs / "smoke"], csv=False), tmp_path / "site")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "site" / "overview.csv").read_text())))
    # index, runs, the run's page, agreement and robustness (each saying why there is none)
    assert built.pages == 5 and rows and all(r["n"] == "1" for r in rows)
    assert all(r["ci_low"] == "" for r in rows if r["metric"] not in PER_IMAGE_METRICS)
    assert all(r["ci_method"].startswith("Student t over") for r in rows if r["ci_low"])
    assert any(r["ci_low"] for r in rows if r["metric"] == "acc")
