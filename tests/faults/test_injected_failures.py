"""Injected failures keep results exact or fail with a named error: a corrupt cache block refused
on every open, a live builder in another PID namespace not judged dead, a failure that cannot be
recorded keeping its own error, free space checked before compute, a killed writer's temp file
removed, a flipped checkpoint bit refused, Ctrl-C as exit 130 with one line. (Source: the fault
campaign of issue 18; each failed on the code before it.)"""
from __future__ import annotations

import errno
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cache_helpers import NAME, ROWS, build_toy
from tiny_grid import tiny_grid

import benchmark.cache.entry as entries
import benchmark.cache.store as store
import benchmark.run.runner as runner
import benchmark.run.store as run_store
from benchmark.cache.lock import Owner
from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.run.checkpoint import load_checkpoint, save_checkpoint


# ---- faults ---------------------------------------------------------------------------------------
def test_faults_a_corrupt_middle_block_is_refused_on_every_open_of_a_process(tmp_path: Path) -> None:
    entry, _ = build_toy(tmp_path, rows_per_block=1)  # 40 blocks per array
    bad_row = ROWS // 2
    tokens = entry.path / "tokens.npy"
    data = bytearray(tokens.read_bytes())
    row_bytes = 16 * 8 * 2
    start = len(data) - (ROWS - bad_row) * row_bytes
    data[start:start + row_bytes] = bytes(b ^ 0x80 for b in data[start:start + row_bytes])  # negate the row
    tokens.write_bytes(bytes(data))
    # a seed whose random draw of 6 blocks misses the bad one, as training's reseeding made every later open do
    seed = next(s for s in range(1000) if (random.seed(s), bad_row not in random.sample(range(ROWS), 6))[1])
    for _ in range(2):
        random.seed(seed)
        with pytest.raises(ProtobenchError, match=f"row block {bad_row} .*protobench cache rm {NAME}"):
            entries.open_entry(entry.path, {"seed": 0})


def test_faults_a_live_builder_in_another_pid_namespace_is_not_judged_dead(tmp_path: Path) -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()  # its pid is free here, as a container's builder pid is, seen from another container
    folder = tmp_path / f".tmp-{NAME}-container"
    folder.mkdir()
    Owner(socket.gethostname(), finished.pid, None, "t", "another-boot/pid:[4026532000]").write(folder / store.BUILDER)
    (folder / store.HEARTBEAT).touch()  # beating
    assert not store.build_is_dead(folder, time.time())
    store.remove_leftovers(tmp_path)
    assert folder.exists()


def failing_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, Path, list[str]]:
    """A spec whose run fails in ``prepare`` (with ValueError: boom), its run directory, and the calls."""
    calls: list[str] = []

    def prepare(spec: object, **_: object) -> None:
        calls.append("prepare")
        raise ValueError("boom")

    monkeypatch.setattr(runner, "prepare", prepare)
    return tiny_grid("camp", tmp_path / "data").runs[0], tmp_path / "runs" / "camp" / "r", calls


def test_faults_a_failure_that_cannot_be_recorded_keeps_its_own_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec, run_dir, _ = failing_run(tmp_path, monkeypatch)
    real = run_store.atomic_write_bytes

    def full_for_failure(path: Path, data: bytes) -> None:
        if path.name == "failure.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(run_store, "atomic_write_bytes", full_for_failure)
    with pytest.raises(ValueError, match="boom"):
        runner.execute_run(spec, run_dir, cache_root=None, progress=False)
    assert "FAILED: ValueError: boom" in (run_dir / "log.txt").read_text()
    err = capsys.readouterr().err
    assert "could not write" in err and "failure.json" in err and "ValueError: boom" in err


def test_faults_the_runs_directory_free_space_is_checked_before_compute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, run_dir, calls = failing_run(tmp_path, monkeypatch)
    real = run_store.shutil.disk_usage
    monkeypatch.setattr(run_store.shutil, "disk_usage",
                        lambda p: SimpleNamespace(total=real(p).total, used=real(p).used, free=16 * 2**20))
    with pytest.raises(ProtobenchError, match="bytes are free there"):
        runner.execute_run(spec, run_dir, cache_root=None, progress=False)
    assert calls == []  # nothing computed


def test_faults_a_spec_temp_file_of_a_killed_writer_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, run_dir, _ = failing_run(tmp_path, monkeypatch)
    run_dir.mkdir(parents=True)
    left = run_dir / ".spec.json.0badf00d.tmp"
    left.write_text("{")
    os.utime(left, (time.time() - 2 * 3600, time.time() - 2 * 3600))
    with pytest.raises(ValueError):
        runner.execute_run(spec, run_dir, cache_root=None, progress=False)
    assert not left.exists()


def test_faults_a_checkpoint_with_a_flipped_bit_is_refused_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    weights = torch.full((64,), 1.5)
    save_checkpoint(path, {"format": 2, "method": {"w": weights}, "report": {"code_versions": []}})
    data = bytearray(path.read_bytes())
    at = bytes(data).index(weights.numpy().tobytes())
    data[at + 3] ^= 0x40  # an exponent bit of the first float
    path.write_bytes(bytes(data))
    with pytest.raises(ProtobenchError, match="is corrupt"):
        load_checkpoint(path)


def test_faults_ctrl_c_exits_130_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import benchmark.cli.runs as cli

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_status", interrupted)
    assert main(["status", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "protobench: interrupted\n"
