"""RunIndex against a plain Python dict, over many batches (so its chunks merge)."""

from __future__ import annotations

import numpy as np

from kindex_etl.normalize.dedup import RunIndex


def test_matches_a_dict_across_batches_and_merges():
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


def test_first_occurrence_in_a_batch_wins():
    index = RunIndex()
    result = index.classify(np.array([9, 9, 9], np.uint64), np.array([1, 1, 2], np.uint64))
    assert result.keep.tolist() == [True, False, False]
    assert result.duplicate.tolist() == [False, True, False]
    assert result.conflict.tolist() == [False, False, True]
