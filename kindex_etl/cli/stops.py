"""Clean stops: Ctrl-C or SIGTERM ends a command within seconds, with one line and 130 / 143.

What is committed is safe whenever the process dies (the commit record is the atomic step), so
a stop need not unwind Prefect's engine (which takes a minute and prints pages of tracebacks).
It waits only while a commit is being made visible (record, publish, snapshot; see
`progress.shielded`), bounded by GRACE_S, prints what was committed and that a re-run continues,
and exits at once. Staged files of the batch in flight are orphans the next run removes.
Before it exits, the command's flow runs are marked `Cancelled` in Prefect (`flow_runs`).
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


ASK_S = 2.0  # the longest a stop waits to read the warehouse's head

# The warehouse a command works on and its head when the command began (`watch`): for the
# commands whose work is not an ingest's batches (compact, vacuum, replay, reprocess,
# regressions), a stop reads the head again to tell what was committed meanwhile.
_watched: tuple[str, int] | None = None


def watch(url: str, head: int) -> None:
    global _watched
    _watched = (url, head)
    progress.forget()  # what a stop says is of this command, not of an earlier ingest


def _head(url: str) -> int:
    from kindex_etl.load.warehouse import open_warehouse

    warehouse = open_warehouse(url, create=False)
    warehouse.refresh()
    return warehouse.head


def _since_start() -> str:
    if _watched is None:
        return "nothing was committed"
    url, before = _watched
    found: list[int] = []
    reader = threading.Thread(target=lambda: found.append(_head(url)), daemon=True)
    reader.start()
    reader.join(ASK_S)
    if not found:
        return f"the warehouse did not answer in {ASK_S:.0f} s; any commit made is whole"
    if found[0] == before:
        return "nothing was committed"
    span = f"commit {found[0]}" if found[0] == before + 1 else f"commits {before + 1}-{found[0]}"
    return f"the warehouse moved from commit {before} to {found[0]} ({span}, each whole)"


def _line(signum: int) -> str:
    name = "interrupted" if signum == signal.SIGINT else "stopped (SIGTERM)"
    p = progress.current()
    done = p.committed_line() if p is not None and p.commits else _since_start()
    return f"kindex-etl: {name}: {done}; run the same command again to continue"


def _end_flow_runs(signum: int) -> None:
    """The flow runs of this process end `Cancelled` in Prefect, not `Running` for good (the
    engine is never unwound: `kindex_etl.flow_runs`). Only where a flow ran: no Prefect import."""
    if "prefect" not in sys.modules:
        return
    from kindex_etl import flow_runs

    how = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else "SIGTERM"
    flow_runs.end_unfinished(
        f"kindex-etl was stopped by {how}; what was committed stays, and the same command continues"
    )
    flow_runs.forget_ledger()  # ended: nothing for the next command to mark Crashed


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
            _end_flow_runs(signum)
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
