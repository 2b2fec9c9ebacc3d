"""Faults injected into the token cache: builders that both believe they hold the lock, readers
of entries being replaced, dead and live leftovers, corruption, a full disk, kill -9 mid-build."""
from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from cache_helpers import NAME, build_toy, flip_byte, read_all, toy_arrays
from support import HELPERS, REPO, scaled
from tiny_token_source import KEY, TinyDataset, assert_same, everything, tiny_trunk

import benchmark.cache.arrays as arrays_module
import benchmark.cache.entry as entries
import benchmark.cache.store as store
from benchmark.cache.lock import STALE_AFTER_SECONDS, Owner, pid_space
from benchmark.cache.tokens import cache_entries, token_source
from benchmark.cli import main
from benchmark.errors import ProtobenchError

FORK = multiprocessing.get_context("fork")  # children start without re-importing torch
DEADLINE = scaled(120)  # seconds on an idle machine


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def digests(values: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {name: array.tobytes() for name, array in values.items()}


@contextmanager
def no_lock(path, heartbeat, **_):
    yield  # both builders "hold" it, as two nodes do where flock is node-local


def _reader(cache_dir: str, opened, stop, results) -> None:
    """Opens the published entry of key format 1 and reads it until told to stop."""
    entry = entries.open_entry(Path(cache_dir) / NAME, {"format": 1})
    expected = digests(toy_arrays(1))
    opened.set()
    reads, failures = 0, []
    while not stop.is_set() or reads == 0:
        try:
            if digests(read_all(entry)) != expected:
                failures.append("changed")
        except Exception as error:  # noqa: BLE001 (reported to the parent)
            failures.append(repr(error))
        reads += 1
    results.put(("reader", reads, failures))


def _builder(cache_dir: str, barrier, results) -> None:
    """Builds key format 2 under the same name; both builders meet mid-build, and each sweeps
    leftovers there as a third process would."""
    cache = Path(cache_dir)

    def between(batch: int) -> None:
        if batch == 2:
            barrier.wait(timeout=DEADLINE)
            store.remove_leftovers(cache)
            barrier.wait(timeout=DEADLINE)
            assert len(list(cache.glob(".tmp-*"))) == 2  # both live builds survived both sweeps
            barrier.wait(timeout=DEADLINE)

    entry, built = build_toy(cache, key={"format": 2}, seed=2, between=between)
    results.put(("builder", built, digests(read_all(entry)), str(entry.path)))


def test_two_builders_without_a_lock_publish_one_entry_and_spare_readers(tmp_path: Path, monkeypatch) -> None:
    build_toy(tmp_path, key={"format": 1}, seed=1)  # an entry of an older key is published
    monkeypatch.setattr(store, "build_lock", no_lock)
    monkeypatch.setattr(store, "READER_GRACE_SECONDS", 0.0)  # only the reader's own lock protects it
    opened, stop, results, barrier = FORK.Event(), FORK.Event(), FORK.Queue(), FORK.Barrier(2)
    reader = FORK.Process(target=_reader, args=(str(tmp_path), opened, stop, results))
    reader.start()
    try:
        assert opened.wait(DEADLINE)
        builders = [FORK.Process(target=_builder, args=(str(tmp_path), barrier, results)) for _ in range(2)]
        for builder in builders:
            builder.start()
        outcomes = [results.get(timeout=DEADLINE) for _ in builders]
        for builder in builders:
            builder.join(DEADLINE)
            assert builder.exitcode == 0
        # both built (the lock excluded nothing), one published, the other found it and kept it
        assert sorted(built for _, built, _, _ in outcomes) == [False, True]
        assert {path for *_, path in outcomes} == {str(tmp_path / NAME)}
        expected = digests(toy_arrays(2))
        assert all(values == expected for _, _, values, _ in outcomes)
        assert entries.verify_entry(tmp_path / NAME) == [] and entries.read_manifest(tmp_path / NAME)["key"] == {"format": 2}
        assert not list(tmp_path.glob(".tmp-*"))

        (aside,) = tmp_path.glob(".old-*")  # the old entry was moved aside, not deleted, while read
        assert store.remove_leftovers(tmp_path) == [] and aside.exists()
        stop.set()
        _, reads, failures = results.get(timeout=DEADLINE)
        reader.join(DEADLINE)
        assert reader.exitcode == 0 and reads > 0 and failures == []
        assert store.remove_leftovers(tmp_path) == [aside]  # no reader left: now it goes
    finally:  # a failed assertion must not leave the reader looping (it would hold a core for the rest of the suite)
        stop.set()
        reader.join(DEADLINE)
        if reader.is_alive():
            reader.terminate()


def test_an_entry_published_between_the_check_and_the_move_aside_is_put_back(tmp_path: Path, monkeypatch) -> None:
    """Builder B finds an older key's entry in its place and moves it aside; a builder without the
    lock (A) moves that entry aside and publishes the same key between B's check and B's move.
    B puts A's entry back and keeps it: one publisher, one entry aside (the race that let both
    builders of the test above count as publishers)."""
    build_toy(tmp_path, key={"format": 1}, seed=1)
    elsewhere = tmp_path / "elsewhere"
    build_toy(elsewhere, key={"format": 2}, seed=2)  # A's entry, ready to be renamed into place
    real_move_aside = store.move_aside
    raced = []

    def racing(entry: Path) -> Path | None:
        if not raced:  # A, between B's check and B's move: the old entry aside, its own published
            raced.append(real_move_aside(entry))
            os.rename(elsewhere / NAME, entry)
        return real_move_aside(entry)

    monkeypatch.setattr(store, "build_lock", no_lock)
    monkeypatch.setattr(store, "move_aside", racing)
    entry, built = build_toy(tmp_path, key={"format": 2}, seed=2)
    assert raced and not built  # B kept A's entry
    assert entry.path == tmp_path / NAME and entries.read_manifest(entry.path)["key"] == {"format": 2}
    assert digests(read_all(entry)) == digests(toy_arrays(2))
    assert list(tmp_path.glob(".old-*")) == raced  # only the older key's entry is aside
    assert not list(tmp_path.glob(".tmp-*"))


def _fake_build_folder(cache: Path, tag: str, owner: Owner, beat_age: float) -> Path:
    folder = cache / f".tmp-{NAME}-{tag}"
    folder.mkdir(parents=True)
    owner.write(folder / store.BUILDER)
    (folder / store.HEARTBEAT).touch()
    stamp = time.time() - beat_age
    os.utime(folder / store.HEARTBEAT, (stamp, stamp))
    return folder


def test_only_provably_dead_build_folders_are_removed(tmp_path: Path) -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        here, stale = socket.gethostname(), STALE_AFTER_SECONDS
        dead_here = _fake_build_folder(tmp_path, "dead", Owner(here, finished.pid, None, "t", pid_space()), 0)
        live_here = _fake_build_folder(tmp_path, "live", Owner(here, alive.pid, None, "t", pid_space()), 10 * stale)
        silent_remote = _fake_build_folder(tmp_path, "silent", Owner("node-b", 7, None, "t"), 2 * stale)
        beating_remote = _fake_build_folder(tmp_path, "beating", Owner("node-c", 7, None, "t"), 0)
        entry, built = build_toy(tmp_path)  # the next builder sweeps before it builds
        assert built and entries.verify_entry(entry.path) == []
        assert not dead_here.exists() and not silent_remote.exists()
        assert live_here.exists() and beating_remote.exists()
    finally:
        alive.kill()
        alive.wait()
    assert store.remove_leftovers(tmp_path) == [live_here]  # its process is gone now


def test_truncated_and_same_size_corrupted_cache_are_detected(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    source = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY)
    reference, name = everything(source), source.entry.name
    del source
    flip_byte(tmp_path / name / "block_input.npy", 3)  # same size: silently other tokens before
    with pytest.raises(ProtobenchError, match=f"block_input.npy: row block 0 .*`protobench cache rm {name} "):
        token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY)
    assert main(["cache", "rm", name, "--cache-dir", str(tmp_path)]) == 0
    rebuilt = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY)
    assert_same(everything(rebuilt), reference)
    del rebuilt
    with open(tmp_path / name / "attention.npy", "r+b") as file:
        file.truncate(file.seek(0, 2) - 100)
    with pytest.raises(ProtobenchError, match=f"attention.npy has .* bytes.*protobench cache rm {name}"):
        token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY)


def test_disk_full_during_the_trunk_pass_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    real_write, calls = arrays_module.ArrayWriter.write, []

    def write(self, rows):
        calls.append(self.path.name)
        if len(calls) == 4:  # the second batch (three arrays per batch)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, rows)

    monkeypatch.setattr(arrays_module.ArrayWriter, "write", write)
    with pytest.raises(ProtobenchError, match=rf"disk filled .*{tmp_path}.*needs .* \(\d+ bytes\), .* are free"):
        token_source(tiny_trunk(), TinyDataset(), cache_dir=tmp_path, backbone_key=KEY, batch_size=2)
    assert cache_entries(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == [".locks"]
    assert list((tmp_path / ".locks").iterdir()) == []


RLIMIT_SCRIPT = """
import resource, signal, sys
from pathlib import Path
import numpy as np
from benchmark.cache.store import open_or_build
from benchmark.errors import ProtobenchError
from cache_helpers import toy_fill, toy_layout
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
arrays = {"tokens": np.ones((100, 64, 32), np.float16), "labels": np.zeros(100, np.int64)}  # 400 kB
try:
    open_or_build(Path(sys.argv[1]), "big", {"k": 1}, toy_layout(arrays), toy_fill(arrays, batch=10))
except ProtobenchError as error:
    print(error)
    sys.exit(3)
"""


def test_file_size_limit_during_a_build_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", RLIMIT_SCRIPT, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=DEADLINE)
    assert done.returncode == 3, done.stderr
    assert f"disk filled while building the token-cache entry {tmp_path / 'big'}" in done.stdout
    assert "File too large" in done.stdout and "bytes)" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks"]


class HangingDataset(TinyDataset):
    """Blocks forever on image ``hang_at`` (a build that is killed there)."""

    def __init__(self, hang_at: int) -> None:
        super().__init__()
        self.hang_at = hang_at

    def __getitem__(self, index: int):
        if index == self.hang_at:
            time.sleep(3600)
        return super().__getitem__(index)


def _build_and_hang(cache_dir: str) -> None:
    token_source(tiny_trunk(), HangingDataset(hang_at=3), cache_dir=Path(cache_dir), backbone_key=KEY, batch_size=1)


def test_kill9_during_a_build_then_the_next_build_gives_identical_arrays(tmp_path: Path) -> None:
    child = FORK.Process(target=_build_and_hang, args=(str(tmp_path),))
    child.start()

    def rows_on_disk() -> bool:  # three rows written, at least one flushed past the write buffer
        files = list(tmp_path.glob(".tmp-*/block_input.npy"))
        return bool(files) and files[0].stat().st_size > 69 * 32 * 2

    wait_for(rows_on_disk, "the child to write rows")
    os.kill(child.pid, signal.SIGKILL)
    child.join(DEADLINE)
    assert child.exitcode == -signal.SIGKILL
    assert list(tmp_path.glob(".tmp-*")) and list((tmp_path / ".locks").iterdir())  # what it left

    trunk = tiny_trunk()
    after = token_source(trunk, TinyDataset(), cache_dir=tmp_path, backbone_key=KEY)  # lock and folder: dead
    fresh = token_source(trunk, TinyDataset(), cache_dir=tmp_path / "fresh", backbone_key=KEY)
    assert_same(everything(after), everything(fresh))
    assert not list(tmp_path.glob(".tmp-*")) and list((tmp_path / ".locks").iterdir()) == []


def test_a_staged_token_source_equals_the_shared_one(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    shared = token_source(trunk, data, cache_dir=tmp_path / "shared", backbone_key=KEY, early_block=0)
    staged = token_source(trunk, data, cache_dir=tmp_path / "shared", backbone_key=KEY, early_block=0,
                          stage_dir=tmp_path / "local")
    assert staged.entry == tmp_path / "local" / shared.entry.name
    assert_same(everything(staged), everything(shared))
    assert staged.manifest["arrays"] == shared.manifest["arrays"]
    assert torch.equal(staged.labels, shared.labels)
