"""Marks: `{"seq": N}` hints under `_kindex/` that say how far a step has got through the
warehouse's commits (`analysed`: looked at; `announce`: told).

Each mark is a plain put, never a compare-and-swap. Every value written is true when written,
and one moved back by a slower writer only makes the next run redo some work.
"""

from __future__ import annotations

import json

from ..storage import NotFound, ObjectStore


def read_mark(store: ObjectStore, key: str) -> int | None:
    """The commit the mark names; None where there is none (or it is not one)."""
    try:
        seq = json.loads(store.get_bytes(key)).get("seq")
    except (NotFound, FileNotFoundError, ValueError, AttributeError):
        return None
    return seq if isinstance(seq, int) and seq >= 0 else None


def write_mark(store: ObjectStore, key: str, seq: int) -> None:
    store.put_bytes(key, json.dumps({"seq": seq}).encode())
