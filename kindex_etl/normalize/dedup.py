"""Run identity across rows, objects and ingests, in a few bytes per run.

A run key is (series, observed second): the series id is interned to a process-local integer,
so a key is one uint64 and a million runs cost 12 MB (key plus the low 32 bits of the value
fingerprint), whatever the width of their externalIds. Keys are exact; only the value
comparison is a fingerprint: a re-delivered run with other values passes for a duplicate
with odds of 2**-32.

The index is the one part of an ingest's memory that grows with the runs it has seen (at 20M
runs, 205 MiB of a 1.6 GiB peak). So with `spill`, a chunk that freezes goes to an unlinked
temporary file, mapped, and only its Bloom filter stays in memory (1.5 bytes a run): a lookup
reads the file for the few keys the filter cannot rule out (all of them when a whole file is
delivered again), one chunk at a time, and hands the pages back after each.
"""

from __future__ import annotations

import mmap
import tempfile
from dataclasses import dataclass

import numpy as np

_MERGE_AT = 8
# A merged chunk this large is frozen (never merged again): a merge then copies at most this
# many keys, where merging into one ever-growing chunk briefly held the whole index twice.
FROZEN_RUNS = 1 << 21
# The in-memory part of the index: a 32-bit fingerprint is a quarter less of it than the 64
# bits stored beside checkpoints.
_FP = np.uint32
# A blocked Bloom filter: each key sets _PROBES bits of one 64-bit word. 12 bits a run let
# through about 1 % of the keys a chunk does not hold (tests/normalize/test_dedup.py).
_BLOOM_BITS_PER_RUN = 12
_PROBES = 6
# A frozen chunk's filter is built this many keys at a time: over a whole chunk (2M keys), the
# hashes, bits and splitmix64's temporaries held 64 MiB for a moment, a spike that only
# ingests past 2M runs paid (6 MiB by slices: `spill_peak`
# of benchmarks/micro_ingest.py, in git history).
_BLOOM_SLICE = 1 << 16
_U64 = np.uint64


@dataclass
class DedupResult:
    keep: np.ndarray  # bool per input: a new run
    duplicate: np.ndarray  # bool: the same measurement was already seen
    conflict: np.ndarray  # bool: same run key, different values or origin


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64s: well-mixed bits from keys that are far from random."""
    with np.errstate(over="ignore"):
        z = x + _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


def _hashed(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each key's hash and its Bloom bits (the low 36 bits pick them; the high 32, the word)."""
    hashed = splitmix64(keys.astype(_U64, copy=False))
    bits = np.zeros(len(hashed), dtype=_U64)
    for probe in range(_PROBES):
        bits |= _U64(1) << ((hashed >> _U64(6 * probe)) & _U64(63))
    return hashed, bits


def _sorted_find(
    sorted_keys: np.ndarray, sorted_fps: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each of `keys`: whether `sorted_keys` holds it, and the fingerprint stored with it."""
    pos = np.searchsorted(sorted_keys, keys)
    pos_clipped = np.minimum(pos, len(sorted_keys) - 1)
    hit = (pos < len(sorted_keys)) & (sorted_keys[pos_clipped] == keys)
    return hit, sorted_fps[pos_clipped[hit]]


class _Spilled:
    """A frozen chunk in an unlinked temporary file (gone with the process, even a killed one);
    in memory only its Bloom filter."""

    def __init__(self, sorted_keys: np.ndarray, sorted_fps: np.ndarray) -> None:
        self._n = n = len(sorted_keys)
        self._words = np.zeros(max(1, n * _BLOOM_BITS_PER_RUN // 64), dtype=_U64)
        for start in range(0, n, _BLOOM_SLICE):
            hashed, bits = _hashed(sorted_keys[start : start + _BLOOM_SLICE])
            np.bitwise_or.at(self._words, self._word(hashed), bits)
        with tempfile.TemporaryFile(prefix="kindex-index-") as fh:
            sorted_keys.astype(_U64, copy=False).tofile(fh)
            sorted_fps.astype(_FP, copy=False).tofile(fh)
            fh.flush()
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return self._n

    def _word(self, hashed: np.ndarray) -> np.ndarray:
        # Lemire's multiply-shift: the high 32 bits scaled to the word count, without a modulo.
        return ((hashed >> _U64(32)) * _U64(len(self._words))) >> _U64(32)

    def may_hold(self, hashed: np.ndarray, bits: np.ndarray) -> np.ndarray:
        return (self._words[self._word(hashed)] & bits) == bits

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        stored = np.frombuffer(self._map, dtype=_U64, count=self._n)
        fps = np.frombuffer(self._map, dtype=_FP, count=self._n, offset=8 * self._n)
        hit, found = _sorted_find(stored, fps, keys)
        del stored, fps
        # The pages stay in the page cache, out of this process's resident set until next time.
        self._map.madvise(mmap.MADV_DONTNEED)
        return hit, found


class RunIndex:
    def __init__(self, *, spill: bool = False) -> None:
        """`spill`: frozen chunks go to temporary files (see the module's docstring)."""
        self.spill = spill
        self._frozen: list[tuple[np.ndarray, np.ndarray]] = []
        self._spilled: list[_Spilled] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        in_memory = sum(len(k) for k, _ in (*self._frozen, *self._chunks))
        return in_memory + sum(len(s) for s in self._spilled)

    def chunk_sizes(self) -> list[int]:
        """Runs per chunk, frozen (in memory or spilled) first: how the index is held."""
        return (
            [len(k) for k, _ in self._frozen]
            + [len(s) for s in self._spilled]
            + [len(k) for k, _ in self._chunks]
        )

    def _lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.zeros(len(keys), dtype=bool)
        fps = np.zeros(len(keys), dtype=_FP)
        for chunk_keys, chunk_fps in (*self._frozen, *self._chunks):
            hit, hit_fps = _sorted_find(chunk_keys, chunk_fps, keys)
            new = hit & ~found
            fps[new] = hit_fps[new[hit]]
            found |= new
        if self._spilled:
            hashed, bits = _hashed(keys)
            for chunk in self._spilled:
                maybe = np.flatnonzero(~found & chunk.may_hold(hashed, bits))
                if len(maybe):
                    hit, hit_fps = chunk.find(keys[maybe])
                    fps[maybe[hit]] = hit_fps
                    found[maybe[hit]] = True
        return found, fps

    def _freeze(self, sorted_keys: np.ndarray, sorted_fps: np.ndarray) -> None:
        if not self.spill:
            self._frozen.append((sorted_keys, sorted_fps))
            return
        # Pieces of one to two FROZEN_RUNS: a lookup maps at most that much of a file at a time.
        pieces = max(1, len(sorted_keys) // FROZEN_RUNS)
        for keys, fps in zip(
            np.array_split(sorted_keys, pieces), np.array_split(sorted_fps, pieces), strict=True
        ):
            self._spilled.append(_Spilled(keys, fps))

    def add(self, keys: np.ndarray, fps: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        self._add_sorted(keys[order], fps.astype(_FP, copy=False)[order])

    def _add_sorted(self, keys: np.ndarray, fps: np.ndarray) -> None:
        if not len(keys):
            return
        if len(keys) >= FROZEN_RUNS:  # a start-up's stored index: never copied again
            self._freeze(keys, fps)
            return
        self._chunks.append((keys, fps))
        if len(self._chunks) >= _MERGE_AT:
            # Sort the small chunks together, then insert them into the growing one: no argsort
            # (and no index array) over everything, so a merge costs one copy of that chunk.
            big_keys, big_fps = self._chunks[0]
            small_keys = np.concatenate([k for k, _ in self._chunks[1:]])
            small_fps = np.concatenate([f for _, f in self._chunks[1:]])
            order = np.argsort(small_keys, kind="stable")
            small_keys, small_fps = small_keys[order], small_fps[order]
            at = np.searchsorted(big_keys, small_keys)
            merged = (np.insert(big_keys, at, small_keys), np.insert(big_fps, at, small_fps))
            if len(merged[0]) >= FROZEN_RUNS:
                self._chunks = []
                self._freeze(*merged)
            else:
                self._chunks = [merged]

    def classify(self, keys: np.ndarray, fps: np.ndarray) -> DedupResult:
        """Split a batch into new runs, duplicates and conflicts, then remember the new ones.

        Within the batch the first occurrence of a key wins, as it would across batches.
        """
        n = len(keys)
        fps = fps.astype(_FP, copy=False)
        # Everything in key order: a binary search for sorted keys walks memory forwards (20x
        # faster than in the batch's own order for 1M keys in 2M: benchmarks/micro_ingest.py,
        # in git history).
        # Not a stable sort (5x slower for a 20k block): each group's first occurrence is its
        # smallest position instead.
        order = np.argsort(keys)
        sorted_keys = keys[order]
        group_start = np.empty(n, dtype=bool)
        group_start[:1] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=group_start[1:])
        starts = np.flatnonzero(group_start)
        group = np.cumsum(group_start) - 1
        first = np.minimum.reduceat(order, starts) if n else order
        seen, seen_fps = self._lookup(sorted_keys[starts])
        # A repeat inside the batch compares with that batch's first occurrence.
        ref_fps = np.where(seen, seen_fps, fps[first])[group]
        keep_sorted = (order == first[group]) & ~seen[group]
        sorted_fps = fps[order]
        self._add_sorted(sorted_keys[keep_sorted], sorted_fps[keep_sorted])
        keep = np.empty(n, dtype=bool)
        keep[order] = keep_sorted
        same = np.empty(n, dtype=bool)
        same[order] = sorted_fps == ref_fps
        return DedupResult(keep=keep, duplicate=~keep & same, conflict=~keep & ~same)
