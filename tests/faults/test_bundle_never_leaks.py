"""``protobench bundle`` copies nothing from outside the runs it was given and leaves nothing behind
(the fault campaign's cases): a log linked to an outside file is refused by name, ``bundle verify``
refuses any link and a binary manifest with one line, a killed build's folder is removed by the
next build, and ``bundle`` counts the files as ``bundle verify`` does."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.bundle.make import STAGING_KIND
from benchmark.cli import main
from benchmark.run.identity import method_fingerprint, metrics_fingerprint


def _run(root: Path, run_id: str = "0123456789ab") -> Path:
    """A finished run as the readers see it (spec and result; no training needed to bundle)."""
    spec = {"dataset": "synthbirds", "backbone": "dinov2_vits14", "method": "vmfproto", "prototypes_per_class": 2}
    run = root / "grid" / run_id
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps(spec))
    (run / "result.json").write_text(json.dumps({
        "run_id": run_id, "grid": "grid", "spec": spec, "metrics": {"acc": 50.0},
        "method_fingerprint": method_fingerprint("vmfproto"), "metrics_fingerprint": metrics_fingerprint()}))
    (run / "log.txt").write_text("trained\n")
    return run


def test_a_log_linked_to_an_outside_file_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path / "runs")
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY\n")
    (run / "log.txt").unlink()
    (run / "log.txt").symlink_to(secret)
    assert main(["bundle", str(tmp_path / "runs"), "--out", str(tmp_path / "b")]) == 2
    assert "log.txt is a link to a file outside the run folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["id_ed25519", "runs"]


def test_a_link_inside_the_run_folder_is_copied_as_its_file(tmp_path: Path) -> None:
    run = _run(tmp_path / "runs")
    (run / "log.1.txt").write_text("first attempt\n")
    (run / "log.txt").unlink()
    (run / "log.txt").symlink_to(run / "log.1.txt")
    assert main(["bundle", str(tmp_path / "runs"), "--out", str(tmp_path / "b")]) == 0
    copied = tmp_path / "b" / "grid" / run.name / "log.txt"
    assert not copied.is_symlink() and copied.read_text() == "first attempt\n"


def test_bundle_and_verify_count_the_same_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path / "runs")
    assert main(["bundle", str(tmp_path / "runs"), "--out", str(tmp_path / "b")]) == 0
    made = capsys.readouterr().out
    assert main(["bundle", "verify", str(tmp_path / "b")]) == 0
    checked = capsys.readouterr().out
    count = checked.split("all ")[1].split(" file(s)")[0]
    assert f", {count} file(s), to" in made


def test_verify_refuses_a_link_whatever_it_points_to(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path / "runs")
    assert main(["bundle", str(tmp_path / "runs"), "--out", str(tmp_path / "b")]) == 0
    secret = tmp_path / "secret.txt"
    secret.write_text("outside\n")
    log = tmp_path / "b" / "grid" / "0123456789ab" / "log.txt"
    log.unlink()
    log.symlink_to(secret)  # listed in the manifest under its old hash
    (tmp_path / "b" / "extra.txt").symlink_to(secret)  # not listed
    assert main(["bundle", "verify", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert "log.txt: a symbolic link" in err and "extra.txt: a symbolic link" in err and "2 link(s)" in err


def test_a_binary_manifest_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(tmp_path / "runs")
    assert main(["bundle", str(tmp_path / "runs"), "--out", str(tmp_path / "b")]) == 0
    (tmp_path / "b" / "SHA256SUMS").write_bytes(b"\xff\xfe\x00garbage\x80")
    assert main(["bundle", "verify", str(tmp_path / "b")]) == 2
    assert "is not a text manifest (not UTF-8)" in capsys.readouterr().err


def test_a_killed_builds_folder_is_removed_by_the_next_build(tmp_path: Path) -> None:
    _run(tmp_path / "runs")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process that has exited: its pid names an abandoned build
    abandoned = tmp_path / f".b.{STAGING_KIND}-{pid}"
    abandoned.mkdir()
    (abandoned / "half.json").write_text("{")
    (tmp_path / (abandoned.name + ".tar.gz")).write_bytes(b"half")
    live = tmp_path / f".b.{STAGING_KIND}-{os.getppid()}"  # a live process's build is left alone
    live.mkdir()
    assert main(["bundle", str(tmp_path / "runs"), "--out", str(tmp_path / "b")]) == 0
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["b", "b.tar.gz", "runs", live.name]), left
    shutil.rmtree(live)
