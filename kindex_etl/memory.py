"""Keeping a long ingest's (or analysis's) memory and collector costs to what it needs.

Process-wide settings for the bulk work of a batch, and one clean-up between kinds of work:

* `pin_mmap_threshold`: large frees go back to the system (glibc).
* `use_bulk_arrow_pool`: Arrow allocates from jemalloc (faster, and less kept, than mimalloc).
* `keep_arrow_pages`: that jemalloc keeps freed pages a while, for the next batch to reuse.
* `bulk_collector`: Python's cyclic collector stops re-walking what never becomes garbage.
* `release_unused_memory`: what the allocators keep free goes back, before an analysis.

glibc serves an allocation above its mmap threshold with its own mapping and unmaps it on
free; below, from the heap, which only shrinks from the top. The threshold slides up (to
32 MiB) each time a mapped block is freed, so after the first few batches an ingest's
numpy arrays and Python buffers of a few MiB all come from the heap, and the heap stays as
large as the worst moment's fragments (with Arrow on the system allocator, a 20M-row ingest
held 2 GiB resident for ~0.4 GiB that Arrow had allocated). A fixed threshold (which also
stops the sliding) returns every block above it as it is freed. It is 1 MiB, not glibc's
starting 128 KiB: a 20k-row batch's numpy arrays (160 KiB a column of int64) then come from
the heap and its pages are reused, where each was a new mapping faulted in page by page
(5M realistic rows: 2.6M page faults, 1.8M at 1 MiB, for the same peak).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from kindex_etl.config import settings

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
_pinned: int | None = None


@cache
def _libc(function: str) -> Any | None:
    """glibc's `function`, or None where the C library has none (musl, macOS). Looked up
    once: `find_library` runs `ldconfig` to find the library."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function) if name else None
    except (OSError, AttributeError):
        return None


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
    mallopt = _libc("mallopt")
    if mallopt is None or mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(threshold)) != 1:
        return False
    _pinned = threshold
    return True


_ARROW_CONF = "JE_ARROW_MALLOC_CONF"
ARROW_OWN_DECAY_MS = 1000  # Arrow's compiled-in dirty and muzzy decay
_set_conf: str | None = None  # what `keep_arrow_pages` put in the environment


def _decay_conf(ms: int) -> str:
    return f"dirty_decay_ms:{ms},muzzy_decay_ms:{ms}"


def keep_arrow_pages() -> bool:
    """Have Arrow's jemalloc keep freed pages for `KINDEX_ARROW_DECAY_MS` (30 s) before it
    gives them back, where Arrow's own setting is 1 s: an ingest's batches then reuse the
    last one's pages instead of faulting fresh ones in (5M realistic rows: 1.76M page faults
    and 6.4 to 6.7 s of system CPU, against 0.9M and 3.6 to 4.3 s; the benchmark's ingest
    23.5 s against 25.1 to 25.3 s; peak +140 to 180 MiB: docs/performance.md, stop 40).

    jemalloc reads its options once, when pyarrow is imported: this must run first (the
    command's and the flows' entry points call it). False, and nothing done, once pyarrow is
    in. A `JE_ARROW_MALLOC_CONF` in the environment wins; options it does not name keep
    Arrow's compiled-in values (`oversize_threshold:0`).
    """
    global _set_conf
    if "pyarrow" in sys.modules or _ARROW_CONF in os.environ:
        return False
    from pydantic import ValidationError

    try:
        decay = settings().arrow_decay_ms
    except ValidationError:
        return False  # a setting that does not parse: the command reports it, in one line
    _set_conf = _decay_conf(decay)
    os.environ[_ARROW_CONF] = _set_conf
    return True


def worker_arrow_conf() -> str | None:
    """For a spawned analysis worker: Arrow's own decay, where `keep_arrow_pages` set ours
    (which the worker inherits). The analysis gained nothing from kept pages (22.9 to 24.2 s
    either way) and each worker held ~200 MiB more; None: leave the environment's."""
    return _decay_conf(ARROW_OWN_DECAY_MS) if _set_conf is not None else None


def apply_arrow_conf(conf: str | None) -> None:
    """In a fresh process, before pyarrow is imported: `conf` as jemalloc's options."""
    if conf is not None and "pyarrow" not in sys.modules:
        os.environ[_ARROW_CONF] = conf


def use_bulk_arrow_pool() -> str:
    """Arrow's jemalloc pool for the bulk work of a process, where the wheel has it, unless
    `ARROW_DEFAULT_MEMORY_POOL` chose one; returns the pool's backend name. Process-wide.

    Over the realistic files, in-process (`benchmarks/ingest_memory.py`, alternated with
    `ARROW_DEFAULT_MEMORY_POOL=mimalloc`, Arrow's default here): 1M rows 5.1 to 5.4 s against
    5.65 to 5.75 s, peak 893 to 899 MiB against 943 to 950; 5M rows 26.4 s against 28.25 s,
    peak 1,194 to 1,221 MiB against 1,318 to 1,322 (docs/performance.md, "The regressions
    step, stop 22").
    Buffers allocated before keep their own pool, so switching midway is safe.
    """
    import pyarrow as pa

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return str(pa.default_memory_pool().backend_name)
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a build without jemalloc (macOS wheels): Arrow's default
        return str(pa.default_memory_pool().backend_name)
    pa.set_memory_pool(pool)
    return "jemalloc"


# Young-generation threshold 50,000 (CPython's 700), then 20 and 100 collections before an
# older generation is walked (10 and 10).
BULK_GC_THRESHOLDS = (50_000, 20, 100)
_frozen = False


@contextmanager
def bulk_collector() -> Iterator[None]:
    """Run a batch with the cyclic collector tuned for bulk work; thresholds restored after.

    A batch allocates millions of container objects (a `to_pylist`, a dict per descriptor),
    and every 700 allocations start a collection, every 100th a full walk of every object
    alive. Alive are the descriptor table's objects and, in a flow's process, the ~160k of
    Prefect and pydantic: a plain 5M-row ingest spent 3.3 to 3.6 s in the collector, 2.3 s
    of it in 16 or 17 full walks (docs/performance.md, "Speed, stop 21"). The objects alive
    at the first batch (modules, catalogs) are frozen once per process (`gc.freeze`): nearly
    all live as long as the process, and no collection walks them again. (A cycle among them
    that dies later is not reclaimed: a one-time cost, at most what was alive at that
    moment.) The higher thresholds then make collections rare, while a cycle made by the
    batch is still collected. Thresholds are only ever raised, and a collector that was
    disabled stays so.
    """
    global _frozen
    if not _frozen:
        gc.freeze()
        _frozen = True
    before = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(before, BULK_GC_THRESHOLDS, strict=False)))
    try:
        yield
    finally:
        gc.set_threshold(*before)


def release_unused_memory() -> None:
    """Hand what is free back to the system: Arrow's pool, then the top of glibc's heap.

    Arrow's allocator keeps freed pages for reuse. On mimalloc, after a 5M-row ingest, 424 MiB
    of a process's 1,023 MiB were such pages (`release_unused` gave them back), and an
    analysis started in that process, as the ingest flow chains one, stacked its own peak on
    top of them (docs/performance.md, "The regressions step, stop 22"). jemalloc, which bulk
    work uses where it can (`use_bulk_arrow_pool`), keeps fewer, and `release_unused` does not
    shrink what it keeps.
    """
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)
