"""Overlapping the stages on a few cores: a read-ahead iterator and worker threads in a chain.

pyarrow parses, computes, compresses and writes without the GIL, so a reader thread, the
normalizing thread, a builder and a writer really run at once; short queues keep memory bounded.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


class Background:
    """One worker thread running jobs in order, fed through a short queue (bounded memory).

    A job's error is raised in the submitting thread, at its next `submit` or at `close`;
    the jobs after it are skipped.
    """

    def __init__(self, name: str = "kindex-writer", depth: int = 1) -> None:
        """`depth`: jobs that may wait for the thread before `submit` blocks."""
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._error is None:
                try:
                    job()
                except BaseException as exc:  # re-raised in the submitting thread
                    self._error = exc

    def submit(self, job: Callable[[], None]) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(job)

    def close(self) -> None:
        self.abort()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop the thread after its queued jobs (skipped once one failed); idempotent."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()


_DONE = object()


def prefetch(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """Iterate `items` in a thread, `depth` ahead (CSV parsing overlaps normalizing).

    Errors are re-raised here, in order, where the item would have come.
    """
    slots: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                slots.put(item)
            slots.put(_DONE)
        except BaseException as exc:  # handed to the consumer
            slots.put(exc)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="kindex-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                slots.get(timeout=0.05)
        thread.join()
