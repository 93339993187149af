"""Clean stops: Ctrl-C or SIGTERM ends a command within seconds, with one line and 130 / 143.

What is committed is safe whenever the process dies (the commit record is the atomic step), so
a stop need not unwind Prefect's engine (which takes a minute and prints pages of tracebacks).
It waits only while a commit is being made visible (record, publish, snapshot; see
`progress.shielded`), bounded by GRACE_S, prints what was committed and that a re-run continues,
and exits at once. Staged files of the batch in flight are orphans the next run removes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from kindex_etl.ingestion import progress

GRACE_S = 4.0  # the longest a stop waits for a commit to become visible


def _line(signum: int) -> str:
    name = "interrupted" if signum == signal.SIGINT else "stopped (SIGTERM)"
    p = progress.current()
    done = p.committed_line() if p is not None else "nothing was committed"
    return f"kindex-etl: {name}: {done}; run the same command again to continue"


@contextmanager
def clean_stops(before_exit: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Within the block, SIGINT / SIGTERM end the process cleanly (see module doc)."""
    stopping = threading.Event()
    leaving = threading.Lock()

    def leave(signum: int) -> None:
        if not leaving.acquire(blocking=False):
            return  # the timer and the end of a commit may both get here: one line
        try:
            before_exit()
            print(_line(signum), file=sys.stderr, flush=True)
        finally:
            os._exit(128 + signum)

    def handler(signum: int, frame: FrameType | None) -> None:
        if stopping.is_set():
            return
        stopping.set()
        # If a commit is being made visible, finish it first; never wait longer than GRACE_S.
        timer = threading.Timer(GRACE_S, leave, args=(signum,))
        timer.daemon = True
        timer.start()
        progress.stop_when_safe(lambda: leave(signum))

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only (main() called from a thread: no handlers)
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
