"""Keeping a long ingest's (or analysis's) resident memory to what it uses, on glibc.

glibc serves an allocation above its mmap threshold with its own mapping and unmaps it on
free; below, from the heap, which only shrinks from the top. The threshold slides up (to
32 MiB) each time a mapped block is freed, so after the first few batches an ingest's
numpy arrays and Python buffers of a few MiB all come from the heap, and the heap stays as
large as the worst moment's fragments (with Arrow on the system allocator, a 20M-row ingest
held 2 GiB resident for ~0.4 GiB that Arrow had allocated). A fixed threshold (which also
stops the sliding) returns every large block as it is freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from kindex_etl.config import settings

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
_pinned: int | None = None


def pin_mmap_threshold() -> bool:
    """Pin the threshold (KINDEX_MALLOC_MMAP_THRESHOLD bytes; 0 leaves glibc's own).

    True when glibc took it. Elsewhere (musl, macOS) there is no `mallopt`: nothing to do.
    Process-wide and idempotent.
    """
    global _pinned
    threshold = settings().malloc_mmap_threshold
    if threshold == 0:
        return False
    if _pinned == threshold:
        return True
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None or mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(threshold)) != 1:
        return False
    _pinned = threshold
    return True
