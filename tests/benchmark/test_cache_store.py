"""The cache store's parts: checksummed array files, opening checks, the lock, leftovers,
publication that never destroys an entry, staging, permissions and the `protobench cache` command."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cache_helpers import NAME, build_toy, flip_byte, read_all, toy_arrays, toy_fill, toy_layout

import benchmark.cache.lock as lock_module
import benchmark.cache.entry as entries
import benchmark.cache.store as store
from benchmark.cache.arrays import ArraySpec, ArrayWriter, open_array
from benchmark.cache.lock import Heartbeat, Owner, build_lock, pid_space
from benchmark.cache.stage import STAGE_SUBDIR, stage_entry, stage_root
from benchmark.cli import main
from benchmark.config import RunSpec, build_run_spec
from benchmark.errors import ProtobenchError


def test_writer_output_is_numpy_npy_with_independent_block_digests(tmp_path: Path) -> None:
    values = np.random.default_rng(1).standard_normal((23, 5, 3)).astype(np.float16)
    spec = ArraySpec(values.shape, values.dtype, rows_per_block=4)
    writer = ArrayWriter(tmp_path / "a.npy", spec)
    for start, stop in [(0, 3), (3, 4), (4, 13), (13, 23)]:  # batches that straddle block borders
        writer.write(values[start:stop])
    meta = writer.close()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), values)  # numpy reads it back
    expected = [hashlib.sha256(values[r:r + 4].tobytes()).hexdigest()[:32] for r in range(0, 23, 4)]
    assert meta["blocks"] == expected and meta["rows_per_block"] == 4
    assert meta["checksum"] == hashlib.sha256("".join(expected).encode()).hexdigest()[:32]
    assert meta["bytes"] == (tmp_path / "a.npy").stat().st_size
    # default block size: about BLOCK_BYTES per block
    assert ArraySpec((10**6, 256, 384), np.float16).rows_per_block == (4 << 20) // (256 * 384 * 2)
    with pytest.raises(ValueError, match="do not fit"):
        ArrayWriter(tmp_path / "b.npy", spec).write(values.astype(np.float32))


def test_open_array_checks_header_and_size(tmp_path: Path) -> None:
    values = np.arange(24, dtype=np.int64).reshape(6, 4)
    writer = ArrayWriter(tmp_path / "a.npy", ArraySpec(values.shape, values.dtype, 2))
    writer.write(values)
    meta = writer.close()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        np.testing.assert_array_equal(open_array("a", meta, fd), values)
        with pytest.raises(Exception, match="manifest says"):
            open_array("a", {**meta, "shape": [6, 3]}, fd)
        with open(tmp_path / "a.npy", "ab") as file:
            file.write(b"\0" * 8)  # one row too many
        with pytest.raises(Exception, match="bytes"):
            open_array("a", meta, fd)
        with pytest.raises(Exception, match="do not add up"):
            open_array("a", {**meta, "checksum": "0" * 32}, fd)
    finally:
        os.close(fd)


def test_open_samples_blocks_and_verify_checks_all(tmp_path: Path, monkeypatch) -> None:
    entry, built = build_toy(tmp_path, rows_per_block=2)  # 20 blocks per array
    assert built
    tokens = entry.path / "tokens.npy"
    row_bytes = 16 * 8 * 2
    flip_byte(tokens, 10 * row_bytes)  # a byte of row 30: block 15, neither first nor last
    monkeypatch.setattr(entries, "SAMPLE_BLOCKS", 0)  # only the first and last block are sampled
    assert entries.open_entry(entry.path, {"seed": 0}, sample=0) is not None
    assert entries.verify_entry(entry.path) == ["tokens.npy: 1 of 20 row blocks differ from their checksums"]
    for _ in range(2):  # a process's first open hashes every block, whatever the sample size
        with pytest.raises(ProtobenchError, match=f"row block 15 .*protobench cache rm {NAME}"):
            entries.open_entry(entry.path, {"seed": 0})


def test_dead_and_live_owners(tmp_path: Path, monkeypatch) -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    beat = tmp_path / "beat"
    beat.touch()
    now = beat.stat().st_mtime
    here = socket.gethostname()
    assert lock_module.is_dead(Owner(here, finished.pid, None, "t", pid_space()), beat, now)
    assert not lock_module.is_dead(Owner.current(), beat, now)
    # a reused pid: alive, but not the process that was recorded
    assert lock_module.is_dead(Owner(here, os.getpid(), "1", "t", pid_space()), beat, now)
    other = Owner("another-node", 1, None, "t")
    assert not lock_module.is_dead(other, beat, now + lock_module.STALE_AFTER_SECONDS - 1)
    assert lock_module.is_dead(other, beat, now + lock_module.STALE_AFTER_SECONDS + 1)
    assert lock_module.is_dead(None, tmp_path / "never-beaten", now)


def test_heartbeat_refreshes_its_files(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lock_module, "HEARTBEAT_SECONDS", 0.01)
    beat = tmp_path / "beat"
    beat.touch()
    os.utime(beat, (0, 0))
    with Heartbeat() as heartbeat:
        heartbeat.add(beat)
        deadline = time.monotonic() + 30
        while beat.stat().st_mtime == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert beat.stat().st_mtime > 0


def _this_process(owner: Owner | None) -> bool:
    """``owner`` is this process (its ``started`` is the second the lock was taken: not compared,
    so a lock taken just before a second boundary still matches)."""
    now = Owner.current()
    return owner is not None and (owner.host, owner.pid, owner.pid_start, owner.pid_space) == (
        now.host, now.pid, now.pid_start, now.pid_space)


def test_lock_waits_for_the_living_and_takes_over_from_the_dead(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lock_module, "POLL_SECONDS", 0.01)
    path = tmp_path / ".locks" / "x.lock"
    with Heartbeat() as heartbeat:
        with build_lock(path, heartbeat):
            assert _this_process(Owner.read(path))
            with pytest.raises(ProtobenchError, match=f"held by pid {os.getpid()} on {socket.gethostname()}"):
                with build_lock(path, heartbeat, timeout=0.05):
                    pass
        assert not path.exists()  # released
        finished = subprocess.Popen([sys.executable, "-c", "pass"])
        finished.wait()
        Owner(socket.gethostname(), finished.pid, None, "earlier", pid_space()).write(path)
        with build_lock(path, heartbeat, timeout=0.05):  # a dead owner on this host: taken over at once
            assert _this_process(Owner.read(path))
        Owner("another-node", 1, None, "earlier").write(path)
        os.utime(path, (0, 0))  # its heartbeat stopped long ago
        with build_lock(path, heartbeat, timeout=0.05):
            assert _this_process(Owner.read(path))
        Owner("another-node", 1, None, "now").write(path)  # beating: waited for, then a clear error
        with pytest.raises(ProtobenchError, match="another-node"):
            with build_lock(path, heartbeat, timeout=0.05):
                pass


def test_foreign_entry_is_moved_aside_not_deleted(tmp_path: Path, monkeypatch) -> None:
    old, _ = build_toy(tmp_path, key={"format": 1}, seed=1)
    old_values = read_all(old)  # `old` stays open: a reader holding the entry
    new, built = build_toy(tmp_path, key={"format": 2}, seed=2)
    assert built and new.path == tmp_path / NAME and json.loads((new.path / "manifest.json").read_text())["key"] == {
        "format": 2}
    (aside,) = tmp_path.glob(".old-*")
    for name, values in old_values.items():
        np.testing.assert_array_equal(old.arrays[name], values)  # the reader still reads its data
    monkeypatch.setattr(store, "READER_GRACE_SECONDS", 0.0)
    assert store.in_use_here(aside) and store.remove_leftovers(tmp_path) == []  # held: kept
    del old
    assert store.remove_leftovers(tmp_path) == [aside] and not aside.exists()


def test_space_is_checked_before_the_pass(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store, "_free_bytes", lambda path: 1000)
    calls = []
    with pytest.raises(ProtobenchError, match=r"needs .* \(\d+ bytes\), .* \(1000 bytes\) are free") as error:
        build_toy(tmp_path, between=calls.append)
    assert str(tmp_path) in str(error.value) and calls == []  # nothing computed
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks"]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_files_and_folders_follow_the_umask(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        entry, _ = build_toy(tmp_path / "cache")
    finally:
        os.umask(previous)
    assert entry.path.stat().st_mode & 0o777 == 0o777 & ~umask
    for file in entry.path.iterdir():
        assert file.stat().st_mode & 0o777 == 0o666 & ~umask, file.name


def test_staged_copy_equals_the_shared_entry(tmp_path: Path, monkeypatch) -> None:
    shared, _ = build_toy(tmp_path / "shared", rows_per_block=3)
    staged = stage_entry(shared, tmp_path / "local")
    assert staged.path == tmp_path / "local" / NAME and staged.manifest["staged_from"] == str(shared.path)
    assert staged.manifest["arrays"] == shared.manifest["arrays"] and staged.manifest["key"] == shared.manifest["key"]
    for name, values in read_all(shared).items():
        np.testing.assert_array_equal(staged.arrays[name], values)
    assert stage_entry(shared, tmp_path / "local").path == staged.path  # a second job reuses the copy
    # a source that went bad where opening did not look: the copy is refused and nothing kept
    other, _ = build_toy(tmp_path / "shared2", rows_per_block=2)
    flip_byte(other.path / "tokens.npy", 10 * 16 * 8 * 2)
    with pytest.raises(ProtobenchError, match="differs from its source's checksums"):
        stage_entry(other, tmp_path / "local2")
    assert list((tmp_path / "local2").glob("*")) in ([], [tmp_path / "local2" / ".locks"])
    monkeypatch.setenv("SLURM_TMPDIR", str(tmp_path / "slurm"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    assert stage_root() == tmp_path / "slurm" / STAGE_SUBDIR
    monkeypatch.delenv("SLURM_TMPDIR")
    assert stage_root() == tmp_path / "tmp" / STAGE_SUBDIR
    monkeypatch.delenv("TMPDIR")
    with pytest.raises(ProtobenchError, match=r"neither \$SLURM_TMPDIR nor \$TMPDIR"):
        stage_root()


def test_cache_stage_is_operational(tmp_path: Path) -> None:
    base = dict(dataset="synthbirds", backbone="dinov2_vits14_reg4", method="protopnet", prototypes_per_class=2)
    assert RunSpec(**base).run_id == RunSpec(**base, cache_stage="local").run_id
    with pytest.raises(ProtobenchError, match="cache_stage = 'node'"):
        build_run_spec({**base, "cache_stage": "node"}, where="t")


@contextmanager
def _aged(path: Path, days: float):
    stamp = time.time() - days * 86400
    os.utime(path / "last_used", (stamp, stamp))
    yield


def test_cache_command_ls_verify_rm(tmp_path: Path, capsys) -> None:
    cache = tmp_path / "cache"
    entry, _ = build_toy(cache, rows_per_block=4)
    other_name = "toy-test-clean-fedcba9876543210"
    arrays = toy_arrays(5)
    store.open_or_build(cache, other_name, {"seed": 5}, toy_layout(arrays), toy_fill(arrays))
    args = ["--cache-dir", str(cache)]

    assert main(["cache", "ls", *args]) == 0
    out = capsys.readouterr().out
    assert NAME in out and other_name in out and "entry" in out and f"@{socket.gethostname()}" in out
    assert main(["cache", "verify", *args]) == 0
    assert capsys.readouterr().out.count(": ok") == 2

    flip_byte(entry.path / "tokens.npy", 1)  # same size, last row
    assert main(["cache", "verify", *args]) == 1
    captured = capsys.readouterr()
    assert f"{NAME}: CORRUPT" in captured.out and f"protobench cache rm {NAME}" in captured.err
    assert main(["cache", "verify", "fedcba", *args]) == 0  # by key digest prefix

    del entry  # no reader left
    assert main(["cache", "rm", "toy-train", *args]) == 0
    assert f"{NAME}: removed" in capsys.readouterr().out and not (cache / NAME).exists()
    assert main(["cache", "rm", "nothing-like-this", *args]) == 2
    assert "No token-cache entry" in capsys.readouterr().err

    with _aged(cache / other_name, 10):
        assert main(["cache", "rm", "--unused", "30", *args]) == 0
        assert (cache / other_name).exists()
        assert main(["cache", "rm", "--unused", "7", *args]) == 0
    assert not (cache / other_name).exists()


def test_runs_with_cache_stage_local_read_from_scratch(tmp_path: Path, monkeypatch) -> None:
    import benchmark.run.prepare as prepare

    seen: list[dict] = []
    monkeypatch.setattr(prepare, "token_source", lambda *args, **kwargs: seen.append(kwargs))
    monkeypatch.setattr(prepare, "with_frozen_features", lambda source, *args, **kwargs: source)
    method = SimpleNamespace(ctx=SimpleNamespace(early_block_index=0), needs_early_tokens=False,
                             frozen_features=lambda batch: {}, reads=frozenset({"tokens"}))
    base = dict(dataset="synthbirds", backbone="dinov2_vits14_reg4", method="protopnet", prototypes_per_class=2)

    def source(**fields) -> None:
        prepared = prepare.Prepared(RunSpec(**base, **fields), "cpu", None, None, None, method)
        prepared.train_source(tmp_path / "cache", augmented=False)

    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    source(cache_stage="local")
    source()
    source(cache_stage="local", cache=False)
    assert [s["stage_dir"] for s in seen] == [tmp_path / "scratch" / STAGE_SUBDIR, None, None]
    monkeypatch.delenv("TMPDIR")
    with pytest.raises(ProtobenchError, match="cache_stage = 'local'"):
        source(cache_stage="local")
