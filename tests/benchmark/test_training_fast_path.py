"""The training loop's fast path, checked on the CPU: batches of only the arrays a method reads,
cache entries read into RAM, no per-step host synchronisation (losses read once per epoch, a NaN
named by its step), thinned checkpoints, one block pass per evaluation batch, cache builds on the
CPUs SLURM gave. Precision, the prefetcher and determinism: tests/gpu/test_precision.py,
tests/benchmark/test_prefetch.py, tests/gpu/test_determinism.py. (Source: issue 12 item 3.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import benchmark.cache.memory
import benchmark.run.training
from benchmark.cache.tokens import token_source
from benchmark.config import build_run_spec
from benchmark.run.prediction import predict
from benchmark.run.checkpoint import load_checkpoint
from benchmark.run.training import NonFiniteLossError, TrainingInterrupted, train
from example_adapter import CosinePrototypes
from methods.base import TOKEN_FIELDS
from methods.registry import build_method
from methods.testing import SyntheticTokens
from small_runs import BASE, CPU, quiet
from tiny_token_source import KEY, TinyDataset, tiny_trunk


# ---- batches of the arrays a method reads ------------------------------------------------------
def test_a_cached_source_reads_only_the_requested_arrays(tmp_path: Path) -> None:
    source = token_source(tiny_trunk(), TinyDataset(), cache_dir=tmp_path, backbone_key=KEY)

    class Untouchable:
        def __getitem__(self, rows):
            raise AssertionError("an array outside reads was read")

    full = source.batch(torch.arange(4), CPU)
    source._arrays["tokens"] = source._arrays["attention"] = Untouchable()
    only = source.batch(torch.arange(4), CPU, reads=frozenset({"block_input"}))
    assert only.tokens is None and only.attention is None and only.early_tokens is None
    assert torch.equal(only.block_input, full.block_input) and torch.equal(only.labels, full.labels)


def test_the_training_loop_asks_for_the_methods_reads() -> None:
    source = SyntheticTokens()
    method = build_method("protopnet", source.context(2))
    assert method.reads == {"tokens"}  # no appended block: the head reads the frozen tokens only
    asked = []
    original = source.batch
    source.batch = lambda indices, device="cpu", *, reads=TOKEN_FIELDS: asked.append(reads) or original(
        indices, device, reads=reads)
    with pytest.raises(TrainingInterrupted):
        train(method, source, seed=0, batch_size=16, device=CPU, checkpoint_path=None, log=quiet, stop_after_epoch=1)
    assert asked and set(asked) == {method.reads}


# ---- entries read into memory ------------------------------------------------------------------
def test_an_entry_read_into_memory_equals_the_memory_mapped_one(tmp_path: Path, monkeypatch) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    mapped = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, in_memory=False)
    loaded = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, in_memory=True,
                          reads=frozenset({"tokens", "attention"}))
    assert not mapped.in_memory and loaded.in_memory
    assert isinstance(mapped._arrays["block_input"], np.memmap)
    # the tokens are the final norm of block_input (stored once), so reading them loads block_input
    assert type(loaded._arrays["block_input"]) is np.ndarray and type(loaded._arrays["attention"]) is np.ndarray
    attention_only = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, in_memory=True,
                                  reads=frozenset({"attention"}))
    assert isinstance(attention_only._arrays["block_input"], np.memmap)
    rows = torch.tensor([4, 1, 1, 0])
    a, b = mapped.batch(rows, CPU), loaded.batch(rows, CPU)
    for name in ("tokens", "block_input", "attention", "labels"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    # auto: read when the arrays take less than AUTO_FRACTION of the available memory
    nbytes = sum(loaded._arrays[n].nbytes for n in ("block_input", "attention"))
    fraction = benchmark.cache.memory.AUTO_FRACTION
    monkeypatch.setattr(benchmark.cache.memory, "available_memory", lambda: int(nbytes / fraction) + 1)
    assert token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, in_memory="auto").in_memory
    monkeypatch.setattr(benchmark.cache.memory, "available_memory", lambda: int(nbytes / fraction) - 1)
    assert not token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, in_memory="auto").in_memory


def test_available_memory_is_positive_and_bounded_by_the_host() -> None:
    total = Path("/proc/meminfo").read_text().split()[1] if Path("/proc/meminfo").exists() else None
    available = benchmark.cache.memory.available_memory()
    assert available > 0 and (total is None or available <= int(total) * 1024)


# ---- no per-step synchronisation; non-finite losses named at the epoch's end ------------------------
def test_the_loss_is_read_once_per_epoch_and_a_nan_names_its_first_step(tmp_path: Path, monkeypatch) -> None:
    source = SyntheticTokens()  # 48 images, batch 8: 6 steps per epoch
    torch.manual_seed(0)
    method = CosinePrototypes(source.context(2), epochs=3)
    reads = []
    host = benchmark.run.training.StepLosses._host
    monkeypatch.setattr(benchmark.run.training.StepLosses, "_host", lambda self: reads.append(1) or host(self))
    original, calls = method.loss_terms, []

    def poisoned(batch, stage, epoch):
        calls.append(epoch)
        terms = original(batch, stage, epoch)
        if len(calls) in (6 + 4, 6 + 5):  # epoch 1, steps 4 and 5
            terms["ce"] = terms["ce"] * float("nan")
        return terms
    method.loss_terms = poisoned
    with pytest.raises(NonFiniteLossError) as err:
        train(method, source, seed=0, batch_size=8, device=CPU, checkpoint_path=tmp_path / "c.pt", log=quiet)
    message = str(err.value)
    assert "term 'ce' = nan at step 4 of 6 in stage 'train', epoch 1" in message
    assert "previous epoch's checkpoint" in message
    assert len(reads) == 2, "one host read per epoch"
    assert calls == [0] * 6 + [1] * 6, "the epoch ran to its end without waiting for the device"
    assert load_checkpoint(tmp_path / "c.pt")["global_epoch"] == 1, "the bad epoch was not checkpointed"


# ---- thinned checkpoints -------------------------------------------------------------------------
def test_checkpoint_every_thins_checkpoints_and_resumes_exactly(tmp_path: Path, monkeypatch) -> None:
    source = SyntheticTokens()
    saved = []
    write = benchmark.run.training.save_checkpoint
    monkeypatch.setattr(benchmark.run.training, "save_checkpoint",
                        lambda path, payload: saved.append(payload["global_epoch"]) or write(path, payload))

    def build():
        torch.manual_seed(0)
        return CosinePrototypes(source.context(2), epochs=5)

    straight = build()
    train(straight, source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "a.pt", log=quiet,
          checkpoint_every=2)
    assert saved == [2, 4, 5], "every 2nd epoch and the stage's last"
    with pytest.raises(TrainingInterrupted):  # preempted after epoch 3: the last checkpoint is epoch 2
        train(build(), source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "b.pt", log=quiet,
              checkpoint_every=2, stop_after_epoch=3)
    assert load_checkpoint(tmp_path / "b.pt")["global_epoch"] == 2
    lines: list[str] = []
    resumed = build()
    train(resumed, source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "b.pt", log=lines.append,
          checkpoint_every=2)
    assert sum(line.startswith("epoch ") for line in lines) == 3  # epochs 3, 4, 5 ran again
    assert torch.equal(straight.prototypes, resumed.prototypes)


# ---- evaluation: one block pass per batch --------------------------------------------------------
@pytest.mark.parametrize("name, args", [("vmfproto", {}), ("protopnet", {"expanded": True})])
def test_evaluation_runs_the_appended_block_once_per_batch(name: str, args: dict) -> None:
    source = SyntheticTokens()  # 48 images
    torch.manual_seed(0)
    method = build_method(name, source.context(2), **args).eval()
    block = method.appended_block()
    assert block is not None
    passes = []
    next(block.children()).register_forward_hook(lambda *_: passes.append(1))
    with torch.no_grad():
        expected_logits, expected_maps = [], []
        for start in range(0, 48, 16):
            batch = source.batch(torch.arange(start, start + 16))
            expected_logits.append(method.logits(batch))
            expected_maps.append(method.activation_maps(batch, batch.labels))
    assert len(passes) == 6  # without reuse: logits and maps each run the block
    passes.clear()
    pred = predict(method, source, batch_size=16, device=CPU)
    assert len(passes) == 3
    assert torch.equal(pred.logits, torch.cat(expected_logits)) and torch.equal(pred.maps, torch.cat(expected_maps))
    assert "forward" not in vars(block), "the block is left as it was"


def test_cache_builds_use_the_cpus_slurm_gave_the_job(monkeypatch) -> None:
    from benchmark.run.prepare import cache_build_workers

    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert cache_build_workers(build_run_spec(BASE, where="t")) == 0
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    assert cache_build_workers(build_run_spec(BASE, where="t")) == 6
    assert cache_build_workers(build_run_spec({**BASE, "num_workers": 3}, where="t")) == 3
