"""The batch prefetcher (benchmark/cache/prefetch.py): batches in order and equal to synchronous
ones, loading errors raised at their batch, a CUDA copy on its own stream handed over by event
(a stand-in CUDA on the CPU; pinned, on a real GPU under ``gpu``), no stream on the CPU, an early
exit that stops the producer, and training identical with and without it."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from benchmark.cache.prefetch import Prefetcher
from benchmark.cache.tokens import token_source
from benchmark.run.training import prefetch_depth, train
from methods.common.transfer import to_device
from methods.testing import SyntheticTokens
from small_runs import CPU, quiet, vmf
from tiny_token_source import KEY, TinyDataset, tiny_trunk


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
