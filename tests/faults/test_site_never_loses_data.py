"""``protobench site`` never deletes or copies what it did not make (the fault campaign's cases):
an older site that holds the input runs or a user's notes, a runs folder carrying a site marker, an
``--out`` that is a link, a gallery image linked to a file outside the runs, an unwritable ``--out``.
Each refusal names the folder and deletes nothing."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmark.cli import main
from site_support import RICH_RUN, site_runs


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return site_runs(tmp_path)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_site_is_rebuilt_in_place_when_it_holds_only_what_the_suite_wrote(runs: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "site"
    assert main(["site", str(runs), "--out", str(out)]) == 0
    assert main(["site", str(runs), "--out", str(out)]) == 0
    assert (out / "index.html").is_file() and not list(tmp_path.glob(".site.*"))  # nothing left beside it


def test_a_killed_builds_folder_is_removed_by_the_next_build(runs: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)  # a process that has exited: its pid names an abandoned build
    (tmp_path / f".site.site-{dead}").mkdir()
    (tmp_path / f".site.site-{dead}" / "index.html").write_text("half")
    assert main(["site", str(runs), "--out", str(tmp_path / "site")]) == 0
    assert not list(tmp_path.glob(".site.*")) and (tmp_path / "site" / "index.html").is_file()


def test_an_older_site_holding_the_runs_and_notes_is_refused_and_nothing_is_deleted(
        runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "site"
    assert main(["site", str(runs), "--out", str(out)]) == 0
    inside = out / "runs-copy"
    shutil.copytree(runs, inside)
    (out / "notes.md").write_text("my notes\n")
    before = _snapshot(out)
    assert main(["site", str(inside), "--out", str(out)]) == 2
    assert "holds the input" in capsys.readouterr().err
    assert _snapshot(out) == before
    shutil.rmtree(inside)  # the runs gone, the notes remain: still refused, naming them
    assert main(["site", str(runs), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "notes.md" in err and "nothing was deleted" in err
    assert (out / "notes.md").read_text() == "my notes\n"


def test_a_runs_folder_carrying_a_site_marker_is_never_an_output(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (runs / ".protobench-site").write_text("protobench results site\n")
    before = _snapshot(runs)
    assert main(["site", str(runs), "--out", str(runs)]) == 2
    assert "is the input" in capsys.readouterr().err
    assert _snapshot(runs) == before
    grid = next(p for p in runs.iterdir() if p.is_dir())
    assert main(["site", str(grid), "--out", str(runs)]) == 2  # out holds the input
    assert _snapshot(runs) == before


def test_a_folder_with_an_earlier_marker_or_an_edited_page_is_refused(runs: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "site"
    assert main(["site", str(runs), "--out", str(out)]) == 0
    (out / "index.html").write_text("edited by hand")
    assert main(["site", str(runs), "--out", str(out)]) == 2
    assert "index.html" in capsys.readouterr().err and (out / "index.html").read_text() == "edited by hand"
    old = tmp_path / "old"
    old.mkdir()
    (old / ".protobench-site").write_text("protobench results site\n")  # an earlier version's marker: no list
    (old / "index.html").write_text("old")
    assert main(["site", str(runs), "--out", str(old)]) == 2
    assert (old / "index.html").read_text() == "old"


def test_an_out_that_is_a_link_is_one_clear_error(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "site"
    assert main(["site", str(runs), "--out", str(out)]) == 0
    link = tmp_path / "latest"
    link.symlink_to(out, target_is_directory=True)
    assert main(["site", str(runs), "--out", str(link)]) == 2
    assert "is a symbolic link" in capsys.readouterr().err and (out / "index.html").is_file()


def test_a_gallery_image_linked_outside_the_runs_is_not_copied(runs: Path, tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa.png"
    secret.write_bytes(b"PRIVATE KEY")
    (runs.joinpath(*RICH_RUN) / "figures" / "leak.png").symlink_to(secret)
    out = tmp_path / "site"
    assert main(["site", str(runs), "--out", str(out)]) == 0
    assert not any(b"PRIVATE KEY" in p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert any(p.name.endswith("image_0.png") for p in out.rglob("*.png"))  # the run's own image is


def test_an_out_that_cannot_be_written_is_one_line(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["site", str(runs), "--out", "/proc/protobench-site"]) == 2
    assert "cannot write the site to /proc/protobench-site" in capsys.readouterr().err
