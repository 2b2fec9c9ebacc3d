"""Batches read ahead on a background thread while the device computes.

One producer thread loads the batches of a fixed list of index chunks in that order (so the
batch order is exactly the synchronous one) into a bounded queue; the consumer iterates. Reading
a cache entry (NumPy gathers, pinning, host→device copies) releases the GIL, so on CUDA it
overlaps the training step (on a CPU it competes with it: ``benchmark.run.training.prefetch_depth``).
An exception in the producer is re-raised in the consumer at the batch it
belongs to; leaving the loop early (``break``, an exception in the step, ``close()``) stops the
producer before the next batch.

On CUDA the producer's copies are issued ``non_blocking`` from pinned memory on the thread's
current stream, the legacy default stream the consumer computes on, so the consumer's kernels
are ordered after the copies without a host synchronisation.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

#: batches read ahead: one being copied while one is computed on
DEFAULT_DEPTH = 2
_POLL_S = 0.1  # how often a blocked producer looks whether the consumer has left


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class Prefetcher(Generic[T]):
    """Iterate ``load(chunk)`` for every chunk of ``chunks``, in order, loaded ahead on a thread.

    ``depth = 0`` loads synchronously in the caller's thread (the reference behaviour)."""

    def __init__(self, load: Callable[[object], T], chunks: Sequence[object], *, depth: int = DEFAULT_DEPTH) -> None:
        if depth < 0:
            raise ValueError(f"prefetch depth must be >= 0, got {depth}")
        self._load, self._chunks, self._depth = load, list(chunks), depth
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
                yield item  # type: ignore[misc]
        finally:
            self.close()

    def _produce(self, buffer: queue.Queue[object]) -> None:
        for chunk in self._chunks:
            if self._stop.is_set():
                return
            try:
                item: object = self._load(chunk)
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
