"""The read-ahead iterator and the writer thread: order, errors where they belong, bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from kindex_etl.ingestion.threads import Background, prefetch


def test_prefetch_keeps_order_and_runs_ahead_in_another_thread() -> None:
    threads: list[str] = []

    def items() -> Iterator[int]:
        for i in range(5):
            threads.append(threading.current_thread().name)
            yield i

    assert list(prefetch(items())) == [0, 1, 2, 3, 4]
    assert set(threads) == {"kindex-reader"}


def test_prefetch_raises_the_error_where_the_item_would_have_come() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("row 2 is bad")

    got = []
    with pytest.raises(ValueError, match="row 2 is bad"):
        for item in prefetch(items()):
            got.append(item)
    assert got == [1]


def test_prefetch_stops_and_closes_the_producer_when_the_consumer_leaves() -> None:
    produced: list[int] = []
    closed = threading.Event()

    def items() -> Iterator[int]:
        try:
            for i in range(1000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    for item in prefetch(items(), depth=1):
        if item == 2:
            break
    assert closed.wait(5)
    assert len(produced) <= 5  # bounded read-ahead: it did not run through the 1000


def test_background_runs_jobs_in_order_and_reports_the_first_error() -> None:
    done: list[int] = []
    bg = Background()
    for i in range(3):
        bg.submit(lambda i=i: done.append(i))
    bg.close()
    assert done == [0, 1, 2]

    bg = Background()

    def fail() -> None:
        raise OSError("disk full")

    bg.submit(fail)
    time.sleep(0.05)
    with pytest.raises(OSError, match="disk full"):
        bg.submit(lambda: done.append(99))
        bg.close()
    assert 99 not in done  # nothing runs after a failure


@pytest.mark.parametrize("depth", [1, 4])
def test_background_lets_depth_jobs_wait_then_blocks(depth: int) -> None:
    # What bounds the memory of batches waiting for the writer (KINDEX_WRITE_AHEAD).
    release = threading.Event()
    started = threading.Event()
    bg = Background("kindex-test", depth)

    def first() -> None:
        started.set()
        release.wait(5)

    bg.submit(first)
    assert started.wait(5)  # the thread holds the first job; the queue is empty
    for _ in range(depth):
        bg.submit(lambda: None)  # waits in the queue, does not block
    blocked = threading.Thread(target=bg.submit, args=(lambda: None,))
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()  # one more than `depth` waits for room
    release.set()
    blocked.join(5)
    assert not blocked.is_alive()
    bg.close()
