"""Crash points of the commit protocol, for the crash-recovery tests.

A test names a point, and the process stops there as a crash would: in-process (`crash_at`,
which raises `SimulatedCrash`, a BaseException nothing in the pipeline catches) for the fast
matrix, or for real (`KINDEX_FAULT_AT=<point>` in a subprocess's environment: SIGKILL, no
clean-up at all) where only a dead process proves the point.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

FAULT_ENV = "KINDEX_FAULT_AT"
POINTS = (
    "after_stage",
    "after_commit",
    "mid_publish",
    "after_publish",
    "mid_delta",
    "after_checkpoint",
    "compact_after_delta",
    "compact_after_stage",
    "compact_after_commit",
    "compact_after_publish",
    "compact_before_checkpoint",
    "vacuum_mid_delete",
)

_armed: str | None = None


class SimulatedCrash(BaseException):
    """The process 'died' at a crash point (in-process tests only)."""


@contextmanager
def crash_at(point: str) -> Iterator[None]:
    """Within the block, reaching `point` raises SimulatedCrash."""
    global _armed
    if point not in POINTS:
        raise ValueError(f"no crash point {point!r}; known: {', '.join(POINTS)}")
    _armed = point
    try:
        yield
    finally:
        _armed = None


def fault_point(name: str) -> None:
    """Stop here when a test armed this point (see the module doc)."""
    if _armed == name:
        raise SimulatedCrash(name)
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
