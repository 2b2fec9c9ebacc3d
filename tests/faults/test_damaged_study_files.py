"""Damaged tuning study files (the fault campaign's round-5 cases): each is one error naming the
file and the fix, never a traceback, and a summary that names another study is refused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tuning_grid import write_tuning_grid

from benchmark.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    grid = write_tuning_grid(root / "grid.toml", root / "data")
    assert main(["tune", str(grid), "--trials", "1", "--only", "method=vmfproto", "--runs-dir", str(root / "runs")]) == 0
    return root


@pytest.fixture
def study(tuned: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the tuned runs folder: (the grid, its runs folder, the study folder)."""
    runs = tmp_path / "runs"
    shutil.copytree(tuned / "runs", runs)
    (folder,) = [p for p in (runs / "tun.tuning").iterdir() if (p / "journal.log").is_file()]
    return tuned / "grid.toml", runs, folder


SUMMARY_DAMAGE = {
    "not-utf8": (lambda p: p.write_bytes(b"\xff\xfe{\x80}"), "is unreadable"),
    "huge-integer": (lambda p: p.write_text('{"complete": ' + "9" * 5000 + "}"), "is unreadable: not valid JSON"),
    "deep": (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "is unreadable: nested deeper than"),
    "no-cell": (lambda p: p.write_text(json.dumps({k: v for k, v in json.loads(p.read_text()).items() if k != "cell"})),
                "has no valid 'cell'"),
    "other-study": (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "study": "someone-else"})),
                    "names study 'someone-else', but it lies in the folder of study"),
}


@pytest.mark.parametrize("damage", sorted(SUMMARY_DAMAGE))
def test_a_damaged_summary_is_one_error_naming_it(study: tuple[Path, Path, Path], damage: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _, runs, folder = study
    write, expected = SUMMARY_DAMAGE[damage]
    write(folder / "summary.json")
    capsys.readouterr()
    assert main(["report", str(runs), "--tuning"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"protobench: error: {folder / 'summary.json'}") and expected in err, err
    assert "Traceback" not in err and "run `protobench tune` of its grid again" in err


def test_a_journal_cut_short_is_one_error_naming_it(study: tuple[Path, Path, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    grid, runs, folder = study
    journal = folder / "journal.log"
    journal.write_bytes(journal.read_bytes()[:-25])  # the last line half written
    assert main(["tune", str(grid), "--trials", "2", "--only", "method=vmfproto", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"{journal} cannot be replayed" in err and "remove its last, partial line" in err


def test_a_lock_that_is_a_folder_is_one_error_naming_it(study: tuple[Path, Path, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    grid, runs, folder = study
    (folder / ".lock").unlink(missing_ok=True)
    (folder / ".lock").mkdir()
    assert main(["tune", str(grid), "--trials", "2", "--only", "method=vmfproto", "--runs-dir", str(runs)]) == 2
    assert f"{folder / '.lock'} cannot be opened as the study's lock file" in capsys.readouterr().err
