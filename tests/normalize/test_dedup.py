"""RunIndex against a plain Python dict, over many batches (so its chunks merge)."""

from __future__ import annotations

import numpy as np
import pytest

from kindex_etl.normalize import dedup
from kindex_etl.normalize.dedup import RunIndex


@pytest.mark.parametrize("frozen", [dedup.FROZEN_RUNS, 600])
def test_matches_a_dict_across_batches_and_merges(frozen, monkeypatch):
    # 600: chunks freeze as they grow past it, and later runs are checked against them all.
    monkeypatch.setattr(dedup, "FROZEN_RUNS", frozen)
    rng = np.random.default_rng(7)
    index, seen = RunIndex(), {}
    for _ in range(60):
        keys = rng.integers(0, 4000, 250).astype(np.uint64)
        fps = rng.integers(0, 2, 250).astype(np.uint64)  # two "values" per key: some conflict
        result = index.classify(keys, fps)
        for i, (k, f) in enumerate(zip(keys.tolist(), fps.tolist(), strict=True)):
            if k not in seen:
                assert result.keep[i] and not result.duplicate[i] and not result.conflict[i]
                seen[k] = f
            else:
                assert not result.keep[i]
                assert result.duplicate[i] == (seen[k] == f)
                assert result.conflict[i] == (seen[k] != f)
    assert len(index) == len(seen)
    sizes = [len(k) for k, _ in (*index._frozen, *index._chunks)]
    assert bool(index._frozen) == (frozen < len(seen))
    # A merge copies at most a frozen chunk's worth (plus one round of small chunks).
    assert max(sizes) < frozen + 8 * 250


def test_first_occurrence_in_a_batch_wins():
    index = RunIndex()
    result = index.classify(np.array([9, 9, 9], np.uint64), np.array([1, 1, 2], np.uint64))
    assert result.keep.tolist() == [True, False, False]
    assert result.duplicate.tolist() == [False, True, False]
    assert result.conflict.tolist() == [False, False, True]


def test_a_large_addition_is_frozen_as_it_comes(monkeypatch):
    monkeypatch.setattr(dedup, "FROZEN_RUNS", 100)
    index = RunIndex()
    stored = np.arange(0, 1000, 2, dtype=np.uint64)
    index.add(stored[::-1].copy(), stored[::-1] * 3)  # a start-up's stored index, any order
    assert [len(k) for k, _ in index._frozen] == [500] and index._chunks == []
    result = index.classify(np.array([4, 5, 6], np.uint64), np.array([12, 0, 1], np.uint64))
    assert result.duplicate.tolist() == [True, False, False]
    assert result.keep.tolist() == [False, True, False]
    assert result.conflict.tolist() == [False, False, True]
