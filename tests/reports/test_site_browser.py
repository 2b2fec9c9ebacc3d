"""The results site in a real browser: headless Chromium from the system packages loads every
page with no console message (errors, failed script loads) and every local file present, runs
its script, draws every plot and image; sorting and filtering the overview change its rows. A
driver page (tests/helpers/site_driver.html) loads the pages in a frame (``--allow-file-access-
from-files`` makes file:// pages one origin) and reports through ``--dump-dom``; a screenshot of
the overview is written to the test's temporary folder."""
from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest

from benchmark.run.identity import mark_stale
from reports.load import load_runs
from reports.site.build import build_site
from site_support import site_runs

CHROMIUM = Path("/usr/bin/chromium")
DRIVER = Path(__file__).resolve().parents[1] / "helpers" / "site_driver.html"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--enable-logging=stderr", "--v=0")
BROWSER_TIMEOUT_S = 600  # a loaded CI machine; the browser itself runs on virtual time

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium at /usr/bin/chromium (apt-get "
                                 "install chromium; .ci/run installs it)")]


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=BROWSER_TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    out = root / "site"
    build_site(mark_stale(load_runs([site_runs(root)], csv=False)), out, built="2026-01-01 00:00:00 UTC")
    return out


@pytest.fixture(scope="module")
def visited(site: Path) -> tuple[list[dict], str]:
    pages = sorted(p.relative_to(site.parent).as_posix() for p in site.rglob("*.html"))
    driver = site.parent / "driver.html"
    driver.write_text(DRIVER.read_text().replace("__PAGES__", json.dumps(pages))
                      .replace("__OVERVIEW__", json.dumps("site/index.html")))
    done = chromium(site.parent, "--allow-file-access-from-files", "--virtual-time-budget=600000",
                    "--dump-dom", driver.as_uri())
    found = re.search(r'<pre id="out">(.*?)</pre>', done.stdout, re.S)
    assert done.returncode == 0 and found and found.group(1) != "pending", (done.returncode, done.stderr[-2000:])
    return json.loads(html.unescape(found.group(1))), done.stderr


def test_every_page_loads_without_a_console_message(site: Path, visited: tuple[list[dict], str]) -> None:
    records, log = visited
    assert len(records) == len(list(site.rglob("*.html")))
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert not console, console[:5]
    for record in records:
        assert record["ready"] and record["styled"], record
        assert record["scripts"] == 0, record  # no inline script ran: only site.js and plotly.js


def test_every_plot_and_image_renders(visited: tuple[list[dict], str]) -> None:
    records, _ = visited
    by_page = {r["page"]: r for r in records}
    assert by_page["site/index.html"]["plots"] >= 3
    assert sum(r["plots"] for r in records) > by_page["site/index.html"]["plots"]  # run pages draw curves too
    for record in records:
        assert record["rendered"] == record["plots"], record
        assert all(record["images"]), record
    assert any(record["images"] for record in records)  # the gallery's figure


def test_sorting_and_filtering_change_the_rows(visited: tuple[list[dict], str]) -> None:
    records, _ = visited
    table = next(r for r in records if r["page"] == "site/index.html")["table"]
    numbers = [float(v) for v in table["ascending"]]
    assert numbers == sorted(numbers) and table["ascending"] != table["before"]
    assert table["descending"] == table["ascending"][::-1] or [float(v) for v in table["descending"]] == sorted(numbers, reverse=True)
    assert 0 < len(table["filtered"]) < table["total"] and set(table["filtered"]) == {table["choice"]}
    assert table["count"] == str(len(table["filtered"]))


def test_screenshot_of_the_overview(site: Path) -> None:
    shot = site.parent / "overview.png"
    done = chromium(site.parent, "--window-size=1400,2000", "--virtual-time-budget=60000",
                    f"--screenshot={shot}", (site / "index.html").as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshot of the overview: {shot}")
