"""The token cache: build once, read memory-mapped, keyed, crash- and race-safe; live = cached."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.backbones import FrozenTrunk
from benchmark.errors import ProtobenchError
from benchmark.cache.noise import NOISE_CLIP, stability_noise
from benchmark.cache.tokens import (
    CachedTokens,
    LiveTokens,
    View,
    cache_entries,
    expected_cache_key,
    token_source,
)
from benchmark.progress import Progress, Task
from support import scaled
from tiny_token_source import COUNT, KEY, SIZE, TinyDataset, assert_same, everything, tiny_trunk


class RecordingProgress(Progress):
    """A display that records the tasks shown on it."""

    def __init__(self) -> None:
        super().__init__(enabled=True)
        self.shown: list[str] = []

    def task(self, description: str, total: int) -> Task:
        self.shown.append(description)
        return super().task(description, total)


class CountingTrunk:
    """Counts forward calls of a trunk (a forward hook, so the trunk itself is unchanged)."""

    def __init__(self, trunk: FrozenTrunk) -> None:
        self.calls = 0
        trunk.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))




def leftovers(cache_dir: Path) -> list[Path]:
    return list(cache_dir.glob(".tmp-*"))


def test_build_once_then_read_the_same_tensors(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    counter = CountingTrunk(trunk)
    first = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, batch_size=4, early_block=0)
    assert counter.calls == 2  # ceil(6 / 4) batches, one trunk pass each
    second = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, early_block=0)
    assert counter.calls == 2  # read, not rebuilt
    assert isinstance(second, CachedTokens) and len(second) == COUNT and second.grid == (8, 8)

    a, b = everything(first), everything(second)
    assert_same(a, b)
    assert a["tokens"].shape == (COUNT, 64, 32) and a["block_input"].shape == (COUNT, 69, 32)
    assert a["attention"].shape == (COUNT, 64) and a["early_tokens"].shape == (COUNT, 64, 32)
    assert all(t.dtype == torch.float32 for n, t in a.items() if n not in ("labels", "indices"))
    assert torch.equal(a["labels"], torch.as_tensor(data.labels))

    picked = second.batch(torch.tensor([4, 1]), "cpu")  # arbitrary order, rows follow the indices
    torch.testing.assert_close(picked.tokens, a["tokens"][[4, 1]], rtol=0, atol=0)
    assert picked.indices.tolist() == [4, 1] and picked.labels.tolist() == [1, 1]

    (entry,) = cache_entries(tmp_path)
    assert set(entry["arrays"]) == {"block_input", "attention", "labels", "early_tokens"}  # tokens: rebuilt
    assert entry["arrays"]["block_input"]["dtype"] == "float16" and entry["arrays"]["attention"]["dtype"] == "float32"
    assert entry["key"]["weights_checksum"] == trunk.weights_checksum and entry["num_images"] == COUNT
    assert isinstance(np.load(Path(entry["path"]) / "block_input.npy", mmap_mode="r"), np.memmap)
    assert not leftovers(tmp_path)


def test_live_equals_cached_within_float16(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    cached = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, early_block=1)
    live = token_source(trunk, data, cache_dir=None, backbone_key=KEY, early_block=1)
    assert isinstance(live, LiveTokens) and live.grid == cached.grid and torch.equal(live.labels, cached.labels)
    assert_same(everything(live), everything(cached), atol=1e-2)
    torch.testing.assert_close(everything(live)["attention"], everything(cached)["attention"], rtol=0, atol=1e-7)
    # the appended block runs on cached block inputs alone and starts as the identity
    batch = cached.batch(torch.arange(3), "cpu")
    torch.testing.assert_close(trunk.make_appended_block()(batch.block_input), batch.tokens, rtol=0, atol=1e-2)


def test_every_key_field_names_its_own_entry(tmp_path: Path) -> None:
    trunk = tiny_trunk()
    variants = [
        dict(dataset=TinyDataset()),
        dict(dataset=TinyDataset(seed=1)),  # another fingerprint
        dict(dataset=TinyDataset(), view=View("noise", seed=0)),
        dict(dataset=TinyDataset(), view=View("noise", seed=1)),
        dict(dataset=TinyDataset(), dtype="float32"),
        dict(dataset=TinyDataset(), early_block=0),
    ]
    for variant in variants:
        token_source(trunk, cache_dir=tmp_path, backbone_key=KEY, **variant)
    entries = cache_entries(tmp_path)
    assert len(entries) == len(variants) == len({e["path"] for e in entries})
    # a planner predicts the directory without building; a clean view ignores its seed
    planned = expected_cache_key(
        backbone_key=KEY, weights_checksum=trunk.weights_checksum, dataset_fingerprint="tiny-6-0",
        split="train", view=View("clean", seed=7), image_size=SIZE, dtype="float32",
    )
    assert (tmp_path / planned.dirname).is_dir()
    assert tiny_trunk().weights_checksum == trunk.weights_checksum


def test_manifest_with_another_key_is_rebuilt(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    counter = CountingTrunk(trunk)
    source = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY)
    manifest_path = source.entry / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["key"]["dataset_fingerprint"] = "something else"
    manifest_path.write_text(json.dumps(manifest))
    token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY)
    assert counter.calls == 2
    assert json.loads(manifest_path.read_text())["key"]["dataset_fingerprint"] == data.fingerprint()


def test_crash_mid_build_leaves_nothing(tmp_path: Path) -> None:
    trunk = tiny_trunk()
    with pytest.raises(RuntimeError, match="unreadable image 4"):
        token_source(trunk, TinyDataset(fail_at=4), cache_dir=tmp_path, backbone_key=KEY, batch_size=2)
    assert cache_entries(tmp_path) == [] and not leftovers(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [".locks"]
    source = token_source(trunk, TinyDataset(), cache_dir=tmp_path, backbone_key=KEY)
    assert len(source) == COUNT


def test_user_errors(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    with pytest.raises(ProtobenchError, match="dtype 'bfloat16'"):
        token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, dtype="bfloat16")
    with pytest.raises(ProtobenchError, match="does not name the trunk"):
        token_source(trunk, data, cache_dir=tmp_path, backbone_key="dinov2_vits14")
    with pytest.raises(ProtobenchError, match="early_block 5"):
        token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, early_block=5)
    with pytest.raises(ProtobenchError, match="view kind 'blur'"):
        View("blur")
    token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY)
    relabelled = TinyDataset()
    relabelled.labels = relabelled.labels[::-1].copy()  # same fingerprint, other content
    with pytest.raises(ProtobenchError, match="fingerprint"):
        token_source(trunk, relabelled, cache_dir=tmp_path, backbone_key=KEY)


def test_noise_view_depends_on_seed_and_index_only(tmp_path: Path) -> None:
    shape = (3, SIZE, SIZE)
    noise = stability_noise(shape, seed=3, index=5)
    assert torch.equal(noise, stability_noise(shape, seed=3, index=5))
    assert not torch.equal(noise, stability_noise(shape, seed=3, index=6))
    assert not torch.equal(noise, stability_noise(shape, seed=4, index=5))
    assert noise.abs().max() <= NOISE_CLIP and (noise.abs() == NOISE_CLIP).any()  # clipped, not rescaled
    assert 0.160 < noise.std() < 0.166  # std of N(0, 0.2²) clipped at ±1.25σ is 0.1628
    image = torch.full(shape, 3.0)  # far outside [0, 1]: the noisy image is not clamped
    assert torch.equal(View("noise", 3).apply(image, 5), image + noise)
    assert View("clean", 3).apply(image, 5) is image

    trunk, view = tiny_trunk(), View("noise", seed=3)
    common = dict(view=view, backbone_key=KEY)
    by_two = token_source(trunk, TinyDataset(), cache_dir=tmp_path / "a", batch_size=2, **common)
    with RecordingProgress() as bars:
        by_five = token_source(  # DataLoader workers and the progress bar change nothing either
            trunk, TinyDataset(), cache_dir=tmp_path / "b", batch_size=5, num_workers=2, progress=bars, **common
        )
    # the trunk pass is a task on the caller's running display, not a second live display
    # (older rich refuses two at once: a run on a terminal that built a cache crashed)
    assert len(bars.shown) == 1 and bars.shown[0].startswith("trunk pass")
    assert_same(everything(by_two), everything(by_five))
    live = token_source(trunk, TinyDataset(), cache_dir=None, **common)
    reversed_rows = live.batch(torch.arange(COUNT).flip(0), "cpu").tokens.flip(0)
    torch.testing.assert_close(reversed_rows, everything(by_two)["tokens"], rtol=0, atol=1e-2)
    clean = token_source(trunk, TinyDataset(), cache_dir=tmp_path / "a", backbone_key=KEY)
    assert (everything(clean)["tokens"] - everything(by_two)["tokens"]).abs().max() > 1e-2


def _build_in_child(cache_dir: str, barrier, results) -> None:
    """One of two processes racing to build the same entry."""
    trunk = tiny_trunk()
    counter = CountingTrunk(trunk)
    barrier.wait()
    source = token_source(trunk, TinyDataset(delay=0.05), cache_dir=Path(cache_dir), backbone_key=KEY)
    results.put((counter.calls, everything(source)["tokens"].numpy()))


def test_two_processes_build_one_entry(tmp_path: Path) -> None:
    # fork: the children start without re-importing torch and timm; the O_EXCL lock file lets one
    # build while the other waits for it (tests/faults/test_cache_faults.py: the same without the lock)
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_build_in_child, args=(str(tmp_path), barrier, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=scaled(120)) for _ in workers]
    for worker in workers:
        worker.join(timeout=scaled(60))
        assert worker.exitcode == 0
    assert sorted(calls for calls, _ in outcomes) == [0, 1]  # one built (one batch), the other waited and read
    np.testing.assert_array_equal(outcomes[0][1], outcomes[1][1])
    assert len(cache_entries(tmp_path)) == 1 and not leftovers(tmp_path)


class TerminatedWorkerDataset(TinyDataset):
    """Sends SIGTERM to the process loading image 1 (in a worker: what scancel does to every
    process of a SLURM job)."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        if index == 1 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().__getitem__(index)


def test_cache_build_workers_leave_sigterm_to_the_main_process(tmp_path: Path) -> None:
    """A worker killed by SIGTERM would turn a cancellation into a 'DataLoader worker exited
    unexpectedly' failure of the run; the workers ignore it, so the build completes with the
    same arrays as one without workers (the main process alone decides what SIGTERM means)."""
    trunk = tiny_trunk()
    with_workers = token_source(trunk, TerminatedWorkerDataset(), cache_dir=tmp_path / "a", backbone_key=KEY,
                                num_workers=2, batch_size=2)
    without = token_source(trunk, TinyDataset(), cache_dir=tmp_path / "b", backbone_key=KEY, batch_size=2)
    assert_same(everything(with_workers), everything(without))
