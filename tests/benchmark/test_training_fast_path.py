"""The fast GPU path (issue 12 item 3), checked on the CPU: precision field and bf16 autocast with
fp32 islands, batches of only the arrays a method reads, the prefetcher, entries read into RAM,
no per-step host synchronisation, thinned checkpoints, one block pass per evaluation batch.
Tests marked ``gpu`` need CUDA (tests/conftest.py skips them without; ``make gpu-check``)."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

import benchmark.cache.memory
import benchmark.run.training
import methods.common.ot
import methods.vmfproto.model
import methods.vmfproto.overlap
import methods.vmfproto.vmf
from benchmark.cache.prefetch import Prefetcher
from benchmark.cache.tokens import expected_cache_key, token_source
from benchmark.config import RunSpec, build_run_spec
from benchmark.errors import ProtobenchError
from benchmark.run.prediction import predict
from benchmark.run.training import (NonFiniteLossError, TrainingInterrupted, deterministic_algorithms, load_checkpoint,
                                prefetch_depth, train)
from example_adapter import CosinePrototypes
from methods.base import TOKEN_FIELDS
from methods.common.precision import autocast, float32_island, matmul_precision
from methods.common.transfer import to_device
from methods.registry import build_method
from methods.testing import SyntheticTokens
from tiny_token_source import KEY, TinyDataset, tiny_trunk

CPU = torch.device("cpu")
BASE = {"dataset": "synthbirds", "backbone": "dinov2_vits14_reg4", "method": "vmfproto", "prototypes_per_class": 2}


def quiet(line: str) -> None:
    pass


def vmf(source: SyntheticTokens, **kw) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_method("vmfproto", source.context(2), **{"discovery_epochs": 1, "end_to_end_epochs": 1, **kw})


# ---- the RunSpec fields ------------------------------------------------------------------------
def test_precision_changes_the_run_id_operational_fields_do_not() -> None:
    fp32 = build_run_spec(BASE, where="t")
    assert fp32.precision == "fp32" and fp32.cache_in_memory == "auto" and fp32.checkpoint_every == 1
    assert len({fp32.run_id, *(build_run_spec({**BASE, "precision": p}, where="t").run_id for p in ("tf32", "bf16"))}) == 3
    for operational in ({"cache_in_memory": False}, {"cache_in_memory": True}, {"checkpoint_every": 5},
                        {"deterministic": True}):
        assert build_run_spec({**BASE, **operational}, where="t").run_id == fp32.run_id


@pytest.mark.parametrize("key, value, message", [
    ("precision", "fp16", "precision = 'fp16' must be one of fp32, tf32, bf16"),
    ("precision", 16, "precision = 16 must be of type str"),
    ("cache_in_memory", "yes", "cache_in_memory = 'yes' must be 'auto', true or false"),
    ("cache_in_memory", 1, "cache_in_memory = 1 must be 'auto', true or false"),
    ("checkpoint_every", 0, "checkpoint_every = 0 must be ≥ 1"),
    ("deterministic", "yes", "deterministic = 'yes' must be of type bool"),
])
def test_bad_fast_path_fields_are_one_clear_error(key, value, message) -> None:
    with pytest.raises(ProtobenchError, match=message):
        build_run_spec({**BASE, key: value}, where="t")


def test_precision_and_device_type_name_their_own_cache_entry(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    fp32 = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, dtype="float32")
    bf16 = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, dtype="float32", precision="bf16")
    assert fp32.entry != bf16.entry
    assert fp32.manifest["key"]["device_type"] == "cpu" and fp32.manifest["key"]["precision"] == "fp32"
    assert bf16.manifest["key"]["precision"] == "bf16"
    a, b = fp32.batch(torch.arange(6), CPU).tokens, bf16.batch(torch.arange(6), CPU).tokens
    assert not torch.equal(a, b)  # the trunk pass ran in bfloat16 (8 mantissa bits: ~0.4 % per rounding)
    assert (a - b).norm() / a.norm() < 0.05
    on_gpu = dict(backbone_key=KEY, weights_checksum="w", dataset_fingerprint="d")
    assert expected_cache_key(**on_gpu).dirname != expected_cache_key(**on_gpu, device_type="cuda").dirname


def test_tf32_is_set_for_the_run_only() -> None:
    before = torch.get_float32_matmul_precision()
    with matmul_precision("tf32"):
        assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    with matmul_precision("bf16"):
        assert torch.get_float32_matmul_precision() == before
    assert torch.get_float32_matmul_precision() == before


# ---- bf16 autocast with fp32 islands -----------------------------------------------------------
def test_float32_island_widens_low_precision_arguments_and_turns_autocast_off() -> None:
    seen = {}

    @float32_island
    def inside(x, pair, *, y):
        seen.update(x=x.dtype, pair=[t.dtype for t in pair], y=y.dtype, autocast=torch.is_autocast_enabled("cpu"),
                    product=(x @ x).dtype)
        return x

    half = torch.ones(2, 2, dtype=torch.bfloat16)
    with autocast("bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu") and (half.float() @ half.float()).dtype == torch.bfloat16
        inside(half, (half, torch.ones(1, dtype=torch.float64)), y=torch.ones(1, dtype=torch.float16))
    assert seen == {"x": torch.float32, "pair": [torch.float32, torch.float64], "y": torch.float32,
                    "autocast": False, "product": torch.float32}


def test_bf16_vmfproto_trains_and_evaluates_with_fp32_islands(monkeypatch) -> None:
    """Autocast reaches the appended block (its linear layers compute in bfloat16) while the scores
    log C_D(κ) + κμᵀt, the Sinkhorn solver, the vMF normaliser and the LogDet kernel are computed
    from float32/float64 inputs with autocast off (the OT scores arrive in float32)."""
    seen: dict[str, set] = {"ot_scores_outside": set(), "sinkhorn": set(), "normaliser": set(), "logdet": set(),
                            "block": set()}

    def spy(module, name, key, record):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            seen[key].add(record(*args))
            return original(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    autocast_on = lambda: torch.is_autocast_enabled("cpu")  # noqa: E731
    spy(methods.vmfproto.model, "grouped_hard_assignment", "ot_scores_outside", lambda scores, *a: scores.dtype)
    spy(methods.common.ot, "sinkhorn_log", "sinkhorn", lambda scores, *a: (scores.dtype, autocast_on()))
    spy(methods.vmfproto.vmf, "log_normaliser_and_ratio", "normaliser", lambda kappa, *a: (kappa.dtype, autocast_on()))
    spy(methods.vmfproto.overlap, "vmf_kernel", "logdet", lambda mu, kappa: (mu.dtype, autocast_on()))

    source = SyntheticTokens()
    method = vmf(source)
    for layer in method.block.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(lambda module, args, output: seen["block"].add(output.dtype))
    train(method, source, seed=0, batch_size=8, device=CPU, checkpoint_path=None, log=quiet, precision="bf16")
    assert seen["block"] == {torch.bfloat16}, "autocast did not reach the appended block"
    assert seen["ot_scores_outside"] == {torch.float32}
    assert seen["sinkhorn"] == {(torch.float32, False)}
    assert seen["normaliser"] == {(torch.float32, False), (torch.float64, False)}  # scores; LogDet's overlap
    assert seen["logdet"] == {(torch.float64, False)}
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in method.parameters())
    pred = predict(method, source, batch_size=16, device=CPU, precision="bf16")
    assert pred.logits.dtype == pred.maps.dtype == torch.float32
    assert (pred.logits.argmax(1) == pred.labels).float().mean() > 0.5  # 4 classes: chance is 0.25


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


# ---- the prefetcher ----------------------------------------------------------------------------
def test_prefetched_batches_equal_synchronous_ones_in_order(tmp_path: Path) -> None:
    source = token_source(tiny_trunk(), TinyDataset(), cache_dir=tmp_path, backbone_key=KEY)
    order = torch.tensor([5, 0, 3, 1, 4, 2])
    chunks = [order[i:i + 2] for i in range(0, 6, 2)]
    load = lambda rows: source.batch(rows, CPU)  # noqa: E731
    synchronous = list(Prefetcher(load, chunks, depth=0))
    ahead = list(Prefetcher(load, chunks, depth=2))
    assert len(synchronous) == len(ahead) == 3
    for a, b in zip(synchronous, ahead):
        for name in ("tokens", "block_input", "attention", "labels", "indices"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_a_loading_error_is_raised_in_the_consumer_at_its_batch() -> None:
    def load(i):
        if i == 3:
            raise ValueError("unreadable batch 3")
        return i

    got = []
    with pytest.raises(ValueError, match="unreadable batch 3"):
        for item in Prefetcher(load, range(6), depth=2):
            got.append(item)
    assert got == [0, 1, 2]


class FakeCuda:
    """torch.cuda's streams and events stood in for on a CPU: logs the prefetch handshake."""

    def __init__(self, monkeypatch) -> None:  # noqa: ANN001
        self.log: list[tuple] = []
        fake = self

        class Stream:
            def __init__(self, device=None, name="producer") -> None:  # noqa: ANN001
                self.name = name

            def wait_event(self, event) -> None:  # noqa: ANN001
                fake.log.append(("wait", self.name, event.number))

            def wait_stream(self, other) -> None:  # noqa: ANN001
                fake.log.append(("after", self.name, other.name))

        class Event:
            made = 0

            def __init__(self) -> None:
                Event.made += 1
                self.number = Event.made

            def record(self, stream) -> None:  # noqa: ANN001
                fake.log.append(("record", stream.name, self.number))

        @contextmanager
        def on_stream(stream):  # noqa: ANN001
            fake.current = stream.name
            yield
            fake.current = None

        self.current, consumer = None, Stream(name="consumer")
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "stream", on_stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: consumer)
        monkeypatch.setattr(torch.Tensor, "record_stream", lambda tensor, stream: fake.log.append(
            ("owns", stream.name, int(tensor.flatten()[0]))))


def test_prefetch_towards_cuda_loads_on_its_own_stream_and_hands_over_by_event(monkeypatch) -> None:
    cuda = FakeCuda(monkeypatch)
    loaded = {}

    def load(i):
        cuda.log.append(("load", cuda.current, i))
        loaded[i] = {"rows": torch.tensor([i]), "frozen": [torch.tensor([100 + i])]}
        return loaded[i]

    got = []
    for item in Prefetcher(load, range(4), depth=2, device=torch.device("cuda")):
        got.append(item)
        cuda.log.append(("use", "consumer", int(item["rows"])))
    assert [id(item) for item in got] == [id(loaded[i]) for i in range(4)]  # the same tensors, in order
    assert cuda.log[0] == ("after", "producer", "consumer")  # what the loads read was written before
    for i in range(4):
        event = next(e for kind, stream, e in cuda.log if kind == "record" and stream == "producer" and e == i + 1)
        steps = [("load", "producer", i), ("record", "producer", event), ("wait", "consumer", event),
                 ("owns", "consumer", i), ("owns", "consumer", 100 + i), ("use", "consumer", i)]
        positions = [cuda.log.index(step) for step in steps]
        assert positions == sorted(positions), (i, cuda.log)


def test_prefetch_on_a_cpu_or_in_step_makes_no_stream(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "Stream", lambda *args: pytest.fail("a CUDA stream was made"))
    assert list(Prefetcher(lambda i: i, range(3), depth=2, device=CPU)) == [0, 1, 2]
    assert list(Prefetcher(lambda i: i, range(3), depth=0, device=torch.device("cuda"))) == [0, 1, 2]


def test_host_tensors_go_to_cuda_pinned_and_non_blocking(monkeypatch) -> None:
    calls = []

    class Pinned:
        def to(self, device, non_blocking=False):  # noqa: ANN001
            calls.append((device.type, non_blocking))
            return "on the device"

    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda tensor: calls.append("pin") or Pinned())
    assert to_device(torch.ones(2), "cuda") == "on the device" and calls == ["pin", ("cuda", True)]
    calls.clear()
    assert to_device(torch.ones(2), CPU).device == CPU and calls == []  # a CPU run: as before, nothing pinned


def test_leaving_early_stops_the_producer() -> None:
    loaded = []
    prefetcher = Prefetcher(lambda i: loaded.append(i) or i, range(1000), depth=2)
    for item in prefetcher:
        if item == 1:
            break
    prefetcher.close()
    assert not any(t.name == "protobench-prefetch" and t.is_alive() for t in threading.enumerate())
    assert len(loaded) <= 1 + 1 + 2 + 1  # consumed, in the queue, being loaded when told to stop


def test_training_with_and_without_prefetch_is_identical() -> None:
    source = SyntheticTokens()
    runs = []
    for depth in (0, 2):
        method = vmf(source)
        train(method, source, seed=1, batch_size=8, device=CPU, checkpoint_path=None, log=quiet, prefetch=depth)
        runs.append(method.state_dict())
    assert prefetch_depth(CPU) == 0 and prefetch_depth(torch.device("cuda")) == 2  # the default: ahead on CUDA only
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0] if isinstance(runs[0][k], torch.Tensor))


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
    write = benchmark.run.training._save_checkpoint
    monkeypatch.setattr(benchmark.run.training, "_save_checkpoint",
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


# ---- GPU ---------------------------------------------------------------------------------------
#: bf16 vs fp32 after the same training: accuracy within 10 points on 4 synthetic classes (48
#: images: one image is 2 points), per-image GT-class maps correlated ≥ 0.95
BF16_ACCURACY_POINTS = 10.0
BF16_MAP_CORRELATION = 0.95


@pytest.mark.gpu
def test_bf16_metrics_match_fp32_on_cuda() -> None:
    cuda = torch.device("cuda")
    source = SyntheticTokens()
    preds = {}
    for precision in ("fp32", "bf16"):
        method = vmf(source, end_to_end_epochs=3)
        train(method, source, seed=0, batch_size=8, device=cuda, checkpoint_path=None, log=quiet, precision=precision)
        preds[precision] = predict(method, source, batch_size=16, device=cuda, precision=precision)
    accuracy = {p: 100.0 * (v.logits.argmax(1) == v.labels).float().mean().item() for p, v in preds.items()}
    assert abs(accuracy["bf16"] - accuracy["fp32"]) <= BF16_ACCURACY_POINTS, accuracy
    a, b = (preds[p].maps.flatten(1) for p in ("fp32", "bf16"))
    a, b = a - a.mean(1, keepdim=True), b - b.mean(1, keepdim=True)
    correlation = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))
    assert correlation.min() >= BF16_MAP_CORRELATION, correlation.min()


@pytest.mark.gpu
def test_pinned_prefetch_to_cuda_equals_cpu_batches(tmp_path: Path) -> None:
    source = token_source(tiny_trunk(), TinyDataset(), cache_dir=tmp_path, backbone_key=KEY)
    chunks = [torch.tensor([5, 0]), torch.tensor([3, 1]), torch.tensor([4, 2])]
    on_cpu = [source.batch(rows, CPU) for rows in chunks]
    cuda = torch.device("cuda")
    on_gpu = list(Prefetcher(lambda rows: source.batch(rows, cuda), chunks, depth=2, device=cuda))  # own stream
    for a, b in zip(on_cpu, on_gpu):
        assert b.tokens.is_cuda
        for name in ("tokens", "block_input", "attention", "labels"):  # tokens: a LayerNorm on each device
            torch.testing.assert_close(getattr(b, name).cpu(), getattr(a, name), msg=name)  # fp32: reduction order


@pytest.mark.gpu
def test_deterministic_vmfproto_on_cuda_is_bit_identical() -> None:
    """``deterministic = true``: cross-entropy (torch lists NLLLoss among the ops that raise; its
    alert is in the 2-D kernel) and the rest of vMFProto run, and two runs agree bit for bit."""
    source = SyntheticTokens()
    states = []
    with deterministic_algorithms(True):
        for _ in range(2):
            method = vmf(source)
            train(method, source, seed=0, batch_size=8, device=torch.device("cuda"), checkpoint_path=None, log=quiet)
            states.append(method.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0] if isinstance(states[0][k], torch.Tensor))


def test_deterministic_algorithms_is_scoped_to_the_run() -> None:
    assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_algorithms(True):
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()


def test_cublas_workspace_is_set_at_process_start_and_a_non_deterministic_one_is_refused(monkeypatch) -> None:
    """cuBLAS reads CUBLAS_WORKSPACE_CONFIG once, when it starts: ``import benchmark`` sets it
    (a user's value kept), and ``deterministic = true`` refuses a workspace cuBLAS is not
    deterministic with, before anything runs."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    probe = "import benchmark, os, torch; print(os.environ['CUBLAS_WORKSPACE_CONFIG'])"
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == ":4096:8"
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    with pytest.raises(ProtobenchError, match="CUBLAS_WORKSPACE_CONFIG set to :4096:8 or :16:8"):
        with deterministic_algorithms(True):
            raise AssertionError("the run started")
    assert not torch.are_deterministic_algorithms_enabled()


def test_cache_builds_use_the_cpus_slurm_gave_the_job(monkeypatch) -> None:
    from benchmark.run.runner import cache_build_workers

    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert cache_build_workers(build_run_spec(BASE, where="t")) == 0
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    assert cache_build_workers(build_run_spec(BASE, where="t")) == 6
    assert cache_build_workers(build_run_spec({**BASE, "num_workers": 3}, where="t")) == 3


def test_deterministic_runs_of_a_method_without_deterministic_cuda_kernels_are_refused() -> None:
    from benchmark.run.runner import check_deterministic

    source = SyntheticTokens()
    deformable = build_method("deformable_protopnet", source.context(2))
    spec = build_run_spec({**BASE, "method": "deformable_protopnet", "deterministic": True}, where="t")
    with pytest.raises(ProtobenchError, match="grid_sample backward .* has no deterministic kernel"):
        check_deterministic(spec, deformable, torch.device("cuda"))
    check_deterministic(spec, deformable, CPU)  # every CPU op is deterministic
    check_deterministic(spec.with_overrides(method="vmfproto"), vmf(source), torch.device("cuda"))
