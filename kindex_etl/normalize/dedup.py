"""Run identity across rows, objects and ingests, in a few bytes per run.

A run key is (series, observed second): the series id is interned to a process-local integer,
so a key is one uint64 and a million runs cost 12 MB (key plus the low 32 bits of the value
fingerprint), whatever the width of their externalIds. Keys are exact; only the value
comparison is a fingerprint: a re-delivered run with other values passes for a duplicate
with odds of 2**-32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MERGE_AT = 8
# A merged chunk this large is frozen (never merged again): a merge then copies at most this
# many keys, where merging into one ever-growing chunk briefly held the whole index twice.
FROZEN_RUNS = 1 << 21
# The index is the one part of an ingest's memory that grows with the runs it has seen: a
# 32-bit fingerprint is a quarter less of it than the 64 bits stored beside checkpoints.
_FP = np.uint32


@dataclass
class DedupResult:
    keep: np.ndarray  # bool per input: a new run
    duplicate: np.ndarray  # bool: the same measurement was already seen
    conflict: np.ndarray  # bool: same run key, different values or origin


class RunIndex:
    def __init__(self) -> None:
        self._frozen: list[tuple[np.ndarray, np.ndarray]] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        return sum(len(k) for k, _ in (*self._frozen, *self._chunks))

    def _lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.zeros(len(keys), dtype=bool)
        fps = np.zeros(len(keys), dtype=_FP)
        for chunk_keys, chunk_fps in (*self._frozen, *self._chunks):
            pos = np.searchsorted(chunk_keys, keys)
            pos_clipped = np.minimum(pos, len(chunk_keys) - 1)
            hit = (pos < len(chunk_keys)) & (chunk_keys[pos_clipped] == keys) & ~found
            fps[hit] = chunk_fps[pos_clipped[hit]]
            found |= hit
        return found, fps

    def add(self, keys: np.ndarray, fps: np.ndarray) -> None:
        if not len(keys):
            return
        fps = fps.astype(_FP, copy=False)
        order = np.argsort(keys, kind="stable")
        if len(keys) >= FROZEN_RUNS:  # a start-up's stored index: never copied again
            self._frozen.append((keys[order], fps[order]))
            return
        self._chunks.append((keys[order], fps[order]))
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
                self._frozen.append(merged)
                self._chunks = []
            else:
                self._chunks = [merged]

    def classify(self, keys: np.ndarray, fps: np.ndarray) -> DedupResult:
        """Split a batch into new runs, duplicates and conflicts, then remember the new ones.

        Within the batch the first occurrence of a key wins, as it would across batches.
        """
        n = len(keys)
        fps = fps.astype(_FP, copy=False)
        seen, seen_fps = self._lookup(keys)
        _, first = np.unique(keys, return_index=True)
        is_first = np.zeros(n, dtype=bool)
        is_first[first] = True
        # A repeat inside the batch compares with that batch's first occurrence.
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        group_start = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]] if n else np.empty(0, bool)
        first_pos = np.maximum.accumulate(np.where(group_start, np.arange(n), 0)) if n else order
        ref_fps = np.empty(n, dtype=_FP)
        ref_fps[order] = fps[order][first_pos]
        ref_fps = np.where(seen, seen_fps, ref_fps)
        keep = is_first & ~seen
        same = fps == ref_fps
        duplicate = ~keep & same
        conflict = ~keep & ~same
        self.add(keys[keep], fps[keep])
        return DedupResult(keep=keep, duplicate=duplicate, conflict=conflict)
