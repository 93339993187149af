"""Exact lookup of integer rows (descriptor keys as per-column codes) in numpy, batch at a time.

Rows are found by a 64-bit hash, a binary search over the known hashes, and a comparison of
the whole row, so a hash match alone never decides. A row whose hash another known row already
has is kept apart, in a dict by the row's bytes: exact either way, and the dict stays empty
unless two of the rows ever collide (about 2^-64 per pair).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kindex_etl.normalize.dedup import splitmix64


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of a 2-D integer array."""
    hashes = np.zeros(len(rows), dtype=np.uint64)
    for column in rows.T:
        hashes = splitmix64(hashes ^ column.astype(np.uint64))
    return hashes


class KeyIndex:
    """Rows of int32 codes, each with an int64 value; rows are added once and never removed."""

    def __init__(self, hash_rows: Callable[[np.ndarray], np.ndarray] = row_hashes) -> None:
        self._hash_rows = hash_rows  # another hash only to test collisions
        self._hashes = np.empty(0, dtype=np.uint64)  # sorted
        self._rows: np.ndarray | None = None  # aligned with _hashes
        self._values = np.empty(0, dtype=np.int64)
        self._collided: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._hashes) + len(self._collided)

    def find(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: its value (0 where unknown), whether it is known, and its hash."""
        rows = np.ascontiguousarray(rows, dtype=np.int32)
        hashes = self._hash_rows(rows)
        values = np.zeros(len(rows), dtype=np.int64)
        found = np.zeros(len(rows), dtype=bool)
        if self._rows is not None and len(self._hashes):
            at = np.minimum(np.searchsorted(self._hashes, hashes), len(self._hashes) - 1)
            found = (self._hashes[at] == hashes) & (self._rows[at] == rows).all(axis=1)
            values = np.where(found, self._values[at], 0)
        if self._collided:
            for i in np.flatnonzero(~found).tolist():
                value = self._collided.get(rows[i].tobytes())
                if value is not None:
                    values[i], found[i] = value, True
        return values, found, hashes

    def add(self, rows: np.ndarray, hashes: np.ndarray, values: np.ndarray) -> None:
        """Remember distinct rows that `find` did not know, with the hashes it gave them."""
        rows = np.ascontiguousarray(rows, dtype=np.int32)
        _, first = np.unique(hashes, return_index=True)
        fresh = np.zeros(len(rows), dtype=bool)
        fresh[first] = True
        if len(self._hashes):
            at = np.minimum(np.searchsorted(self._hashes, hashes), len(self._hashes) - 1)
            fresh &= self._hashes[at] != hashes
        for i in np.flatnonzero(~fresh).tolist():
            self._collided[rows[i].tobytes()] = int(values[i])
        order = np.flatnonzero(fresh)
        order = order[np.argsort(hashes[order], kind="stable")]
        at = np.searchsorted(self._hashes, hashes[order])
        self._hashes = np.insert(self._hashes, at, hashes[order])
        self._values = np.insert(self._values, at, values[order])
        if self._rows is None:
            self._rows = rows[order]
        else:
            self._rows = np.insert(self._rows, at, rows[order], axis=0)
