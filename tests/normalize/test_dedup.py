"""RunIndex against a plain Python dict, over many batches (so its chunks merge)."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from kindex_etl.normalize import dedup
from kindex_etl.normalize.dedup import RunIndex


@pytest.mark.parametrize("spill", [False, True])
@pytest.mark.parametrize("frozen", [dedup.FROZEN_RUNS, 600])
def test_matches_a_dict_across_batches_and_merges(frozen, spill, monkeypatch):
    # 600: chunks freeze as they grow past it, and later runs are checked against them all.
    monkeypatch.setattr(dedup, "FROZEN_RUNS", frozen)
    rng = np.random.default_rng(7)
    index, seen = RunIndex(spill=spill), {}
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
    assert bool(index._frozen) == (frozen < len(seen) and not spill)
    assert bool(index._spilled) == (frozen < len(seen) and spill)
    # A merge copies at most a frozen chunk's worth (plus one round of small chunks).
    assert max(index.chunk_sizes()) < frozen + 8 * 250


@pytest.mark.parametrize("spill", [False, True])
def test_first_occurrence_in_a_batch_wins(spill, monkeypatch):
    monkeypatch.setattr(dedup, "FROZEN_RUNS", 2)
    index = RunIndex(spill=spill)
    result = index.classify(np.array([9, 9, 9], np.uint64), np.array([1, 1, 2], np.uint64))
    assert result.keep.tolist() == [True, False, False]
    assert result.duplicate.tolist() == [False, True, False]
    assert result.conflict.tolist() == [False, False, True]
    index.add(np.array([20, 10], np.uint64), np.array([5, 6], np.uint64))  # frozen at once
    result = index.classify(np.array([10, 9, 20, 9], np.uint64), np.array([6, 2, 0, 1], np.uint64))
    assert result.keep.tolist() == [False] * 4
    assert result.duplicate.tolist() == [True, False, False, True]
    assert result.conflict.tolist() == [False, True, True, False]


@pytest.mark.parametrize("spill", [False, True])
def test_a_large_addition_is_frozen_as_it_comes(spill, monkeypatch):
    monkeypatch.setattr(dedup, "FROZEN_RUNS", 100)
    index = RunIndex(spill=spill)
    stored = np.arange(0, 1000, 2, dtype=np.uint64)
    index.add(stored[::-1].copy(), stored[::-1] * 3)  # a start-up's stored index, any order
    # In memory one chunk; spilled, pieces of one to two FROZEN_RUNS (a lookup maps one).
    assert index.chunk_sizes() == ([100] * 5 if spill else [500])
    assert index._chunks == []
    result = index.classify(np.array([4, 5, 6], np.uint64), np.array([12, 0, 1], np.uint64))
    assert result.duplicate.tolist() == [True, False, False]
    assert result.keep.tolist() == [False, True, False]
    assert result.conflict.tolist() == [False, False, True]


def test_an_empty_batch_changes_nothing():
    index = RunIndex(spill=True)
    result = index.classify(np.array([], np.uint64), np.array([], np.uint64))
    assert len(result.keep) == len(result.duplicate) == len(result.conflict) == 0
    assert len(index) == 0


def test_spilled_chunks_leave_no_file_and_their_filter_lets_few_absent_keys_through(
    tmp_path, monkeypatch
):
    # Unlinked temporary files: nothing to sweep after a killed process.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(dedup, "FROZEN_RUNS", 50_000)
    # Each chunk's filter built in a dozen or more slices, as a 2M-run chunk's is.
    monkeypatch.setattr(dedup, "_BLOOM_SLICE", 4096)
    rng = np.random.default_rng(3)
    # Run keys as the normalizer makes them: series number in the high half, a second below.
    series = rng.integers(0, 5_000, 200_000).astype(np.uint64) << np.uint64(32)
    keys = np.unique(series | rng.integers(1_600_000_000, 1_700_000_000, 200_000).astype(np.uint64))
    held, absent = keys[::2], keys[1::2]
    index = RunIndex(spill=True)
    index.add(held, held & np.uint64(0xFFFF))
    assert index._spilled and not index._frozen and os.listdir(tmp_path) == []
    # No false negative: every held key is found with its fingerprint.
    found, fps = index._lookup(held)
    assert found.all() and (fps == (held & np.uint64(0xFFFF))).all()
    found, _ = index._lookup(absent)
    assert not found.any()
    passed = np.mean([chunk.may_hold(*dedup._hashed(absent)).mean() for chunk in index._spilled])
    assert 0 < passed < 0.02  # ~1 % at 12 bits a run
