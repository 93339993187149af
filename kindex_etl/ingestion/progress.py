"""Progress of the ingest in this process, as plain values, for whoever watches.

The stages report (`planned`, `rows_read`, `batch_done`); watchers subscribe (`watching`): the
terminal display of `kindex-etl`, the Prefect progress artifact of `flows/`. Nothing here knows
either, and with no watcher a report costs a function call.

`shielded()` marks the commit's visible steps (commit record, publish, snapshot): a stop asked
for meanwhile (Ctrl-C, SIGTERM) waits until they are done, so no commit is left half-published.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kindex_etl.ingestion.commit import BatchOutcome
    from kindex_etl.ingestion.run import Plan


@dataclass
class Progress:
    """One ingest's counts so far; rates and ETA from them."""

    objects_total: int = 0
    bytes_total: int = 0
    batches_total: int = 0
    objects_done: int = 0
    bytes_done: int = 0  # of committed batches
    rows_read: int = 0  # including the batch in flight
    runs_written: int = 0
    duplicates: int = 0
    quarantined: int = 0
    batches_done: int = 0
    commits: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    inflight: dict[str, int] = field(default_factory=dict)  # object key -> bytes read so far
    stage: str = ""  # what runs after the batches (the chained analysis), for the watchers
    tallied: int = 0  # objects of the batch in flight whose commit is counted (`commit_made`)

    @property
    def bytes_seen(self) -> int:
        return self.bytes_done + sum(self.inflight.values())

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def rows_per_s(self) -> float:
        return self.rows_read / max(self.elapsed_s, 1e-6)

    @property
    def eta_s(self) -> float | None:
        """Seconds left, by bytes (objects differ in size); None until something was read."""
        seen = self.bytes_seen
        if not seen or not self.bytes_total:
            return None
        return max(0.0, self.elapsed_s * (self.bytes_total - seen) / seen)

    @property
    def fraction(self) -> float:
        if not self.bytes_total:
            return 1.0 if self.batches_done >= self.batches_total else 0.0
        return min(1.0, self.bytes_seen / self.bytes_total)

    def describe(self) -> str:
        eta = self.eta_s
        return (
            f"batch {self.batches_done}/{self.batches_total}: "
            f"{self.objects_done}/{self.objects_total} objects, {self.rows_read:,} rows "
            f"({self.rows_per_s:,.0f} rows/s), {self.runs_written:,} new runs"
            + (f", commit {self.commits[-1]}" if self.commits else "")
            + (f", eta {eta:.0f} s" if eta is not None and self.fraction < 1 else "")
        )

    def committed_line(self) -> str:
        """What is safely in the warehouse now, in one line."""
        if not self.commits:
            return "nothing was committed"
        first, last = self.commits[0], self.commits[-1]
        span = f"commit {first}" if first == last else f"commits {first}-{last}"
        done = self.batches_done + (1 if self.tallied else 0)
        return (
            f"{done} of {self.batches_total} batch(es) committed ({span}: "
            f"{self.objects_done + self.tallied} objects, {self.runs_written:,} runs)"
        )


Event = str  # "planned" | "rows" | "batch" | "stage"
Listener = Callable[[Event, Progress], None]

_lock = threading.Lock()
_listeners: list[Listener] = []
_current: Progress | None = None
# Rows arrive per CSV block (a few per second): watchers need not hear every one.
_ROWS_EVERY_S = 0.2
_last_rows = 0.0


def current() -> Progress | None:
    return _current


@contextmanager
def watching(listener: Listener) -> Iterator[None]:
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)


def _notify(event: Event, p: Progress) -> None:
    for listener in list(_listeners):
        listener(event, p)


def planned(plan: Plan) -> Progress:
    global _current
    batches = plan.batches
    _current = Progress(
        objects_total=sum(map(len, batches)),
        bytes_total=sum(c.info.size for b in batches for c in b),
        batches_total=len(batches),
    )
    _notify("planned", _current)
    return _current


def forget() -> None:
    """No ingest of this process is in flight any more (a command of another kind starts)."""
    global _current
    _current = None


def rows_read(key: str, rows: int, offset: int) -> None:
    """`rows` more rows of object `key` were read, up to byte `offset` of it."""
    global _last_rows
    p = _current
    if p is None:
        return
    p.rows_read += rows
    p.inflight[key] = offset
    now = time.monotonic()
    if now - _last_rows >= _ROWS_EVERY_S:
        _last_rows = now
        _notify("rows", p)


def batch_done(outcome: BatchOutcome, objects: int, size: int) -> None:
    """A commit batch of `objects` objects (`size` bytes) finished; counts from its outcome."""
    p = _current
    if p is None:
        return
    p.inflight.clear()
    p.batches_done += 1
    p.objects_done += objects
    p.bytes_done += size
    if not p.tallied:
        _tally(p, outcome.reports, outcome.commit)
    p.tallied = 0
    _notify("batch", p)


def _tally(p: Progress, reports: Iterable[Any], commit: int | None) -> None:
    for r in reports:
        p.runs_written += r.runs
        p.duplicates += r.duplicates
        p.quarantined += r.quarantined
    if commit is not None:
        p.commits.append(commit)


def commit_made(seq: int, reports: list[Any]) -> None:
    """A batch's commit record is written: count it now, inside the commit's shield.

    A stop asked for during the commit runs right when the shield ends, before the flow
    hears of the batch (`batch_done`): counted only there, the stop said "nothing was
    committed" of a published commit (issue 32).
    """
    p = _current
    if p is None or p.batches_done >= p.batches_total:
        return  # no planned ingest in flight (a replay, a reprocess, an API ingest)
    _tally(p, reports, seq)
    p.tallied = max(1, len(reports))  # one report per object


def stage(text: str) -> None:
    """The ingest's batches are done and `text` runs now (a bar at 100 % would look stuck)."""
    p = _current
    if p is None:
        return
    p.stage = text
    _notify("stage", p)


# -- stops ---------------------------------------------------------------------------------

_shield_lock = threading.RLock()  # re-entered by a signal handler on the same thread
_shielded = 0
_deferred: Callable[[], None] | None = None


@contextmanager
def shielded() -> Iterator[None]:
    """The visible steps of a commit: a stop requested meanwhile runs right after them."""
    global _shielded, _deferred
    with _shield_lock:
        _shielded += 1
    try:
        yield
    finally:
        with _shield_lock:
            _shielded -= 1
            action = _deferred if _shielded == 0 else None
            if action is not None:
                _deferred = None  # once: a later commit of this process must not run it again
        if action is not None:
            action()


def stop_when_safe(action: Callable[[], None]) -> bool:
    """Run `action` now unless a commit is being made visible; then right after it.

    Returns True when it ran now.
    """
    global _deferred
    with _shield_lock:
        if _shielded:
            _deferred = action
            return False
    action()
    return True
