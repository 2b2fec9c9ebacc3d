"""Batches read ahead on a background thread while the device computes.

One producer thread loads the batches of a fixed list of index chunks in that order (so the
batch order is exactly the synchronous one) into a bounded queue; the consumer iterates. Reading
a cache entry (NumPy gathers, pinning, host→device copies) releases the GIL, so on CUDA it
overlaps the training step (on a CPU it competes with it: ``benchmark.run.training.prefetch_depth``).
An exception in the producer is re-raised in the consumer at the batch it
belongs to; leaving the loop early (``break``, an exception in the step, ``close()``) stops the
producer before the next batch.

Towards CUDA (:class:`StreamHandoff`) the producer loads on a stream of its own: its copies,
issued ``non_blocking`` from pinned memory, and the kernels that widen and normalise the rows
overlap the consumer's compute. An event recorded after each load is what the consumer's stream
waits for (``wait_event``: on the device, the host goes on), and every tensor of the batch is
marked as used by the consumer's stream (``record_stream``), so the caching allocator does not
hand its memory back to the producer's stream before the consumer's kernels have read it.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import torch

T = TypeVar("T")

#: batches read ahead: one being copied while one is computed on
DEFAULT_DEPTH = 2
_POLL_S = 0.1  # how often a blocked producer looks whether the consumer has left


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def tensors_of(item: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``item``: itself, or inside its dataclass fields, mappings and sequences."""
    if isinstance(item, torch.Tensor):
        yield item
    elif dataclasses.is_dataclass(item) and not isinstance(item, type):
        for field in dataclasses.fields(item):
            yield from tensors_of(getattr(item, field.name))
    elif isinstance(item, dict):
        for value in item.values():
            yield from tensors_of(value)
    elif isinstance(item, (list, tuple)):
        for value in item:
            yield from tensors_of(value)


class StreamHandoff:
    """The producer's CUDA stream and the per-batch event handshake with the consumer's stream
    (module docstring). Built in the consumer's thread, whose current stream is the consumer's."""

    def __init__(self, device: torch.device) -> None:
        self.consumer = torch.cuda.current_stream(device)
        self.stream = torch.cuda.Stream(device)
        # what the loads read (the trunk, its norm, precomputed features) was last written on the
        # consumer's stream: the producer's stream starts after it
        self.stream.wait_stream(self.consumer)

    def load(self, load: Callable[[object], T], chunk: object) -> tuple[T, Any]:
        """Producer thread: ``load(chunk)`` on the producer's stream, and the event after it."""
        with torch.cuda.stream(self.stream):
            item = load(chunk)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return item, ready

    def receive(self, item: T, ready: Any) -> T:
        """Consumer thread: the consumer's stream waits for the load, and owns the batch's memory."""
        self.consumer.wait_event(ready)
        for tensor in tensors_of(item):
            tensor.record_stream(self.consumer)
        return item


class Prefetcher(Generic[T]):
    """Iterate ``load(chunk)`` for every chunk of ``chunks``, in order, loaded ahead on a thread
    (towards a CUDA ``device``: on its own stream, :class:`StreamHandoff`).

    ``depth = 0`` loads synchronously in the caller's thread (the reference behaviour)."""

    def __init__(self, load: Callable[[object], T], chunks: Sequence[object], *, depth: int = DEFAULT_DEPTH,
                 device: torch.device | None = None) -> None:
        if depth < 0:
            raise ValueError(f"prefetch depth must be >= 0, got {depth}")
        self._load, self._chunks, self._depth = load, list(chunks), depth
        self._handoff = StreamHandoff(device) if depth > 0 and device is not None and device.type == "cuda" else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __iter__(self) -> Iterator[T]:
        if self._depth == 0:
            for chunk in self._chunks:
                yield self._load(chunk)
            return
        buffer: queue.Queue[object] = queue.Queue(maxsize=self._depth)
        self._thread = threading.Thread(target=self._produce, args=(buffer,), name="protobench-prefetch",
                                        daemon=True)
        self._thread.start()
        try:
            while True:
                item = buffer.get()
                if item is _END:
                    return
                if isinstance(item, _Failed):
                    raise item.error
                if self._handoff is not None:
                    item = self._handoff.receive(*item)  # type: ignore[misc]
                yield item  # type: ignore[misc]
        finally:
            self.close()

    def _produce(self, buffer: queue.Queue[object]) -> None:
        for chunk in self._chunks:
            if self._stop.is_set():
                return
            try:
                item: object = self._load(chunk) if self._handoff is None else self._handoff.load(self._load, chunk)
            except BaseException as error:  # handed to the consumer, raised there
                item = _Failed(error)
            if not self._put(buffer, item) or isinstance(item, _Failed):
                return
        self._put(buffer, _END)

    def _put(self, buffer: queue.Queue[object], item: object) -> bool:
        """Wait for room, unless the consumer has left (then False)."""
        while not self._stop.is_set():
            try:
                buffer.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stop the producer and wait for it (it finishes at most the batch it is loading)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
