import numpy as np
import pytest

from kindex_etl.normalize.key_index import KeyIndex, row_hashes


def _weak_hash(rows: np.ndarray) -> np.ndarray:
    # Eight buckets for thousands of rows: nearly every row shares its hash with another.
    return (rows.sum(axis=1) % 8).astype(np.uint64)


@pytest.mark.parametrize("hash_rows", [row_hashes, _weak_hash], ids=["splitmix", "colliding"])
def test_lookups_agree_with_a_dict_over_many_batches(hash_rows):
    rng = np.random.default_rng(7)
    index = KeyIndex(hash_rows)
    truth: dict[bytes, int] = {}
    repeated = 0
    for batch in range(40):
        # Distinct rows per batch from 4^6 of them, so later batches repeat earlier ones.
        drawn = np.zeros((300, 12), dtype=np.int32)
        drawn[:, ::2] = rng.integers(0, 4, size=(300, 6))
        drawn[:, 1::2] = 5
        rows = np.unique(drawn, axis=0)
        values, found, hashes = index.find(rows)
        repeated += int(found.sum())
        expected = [truth.get(r.tobytes()) for r in rows]
        assert found.tolist() == [e is not None for e in expected]
        assert [int(v) for v, f in zip(values, found, strict=True) if f] == [
            e for e in expected if e is not None
        ]
        new = np.flatnonzero(~found)
        given = np.arange(len(truth), len(truth) + len(new), dtype=np.int64) * (
            -1 if batch % 2 else 1
        )
        index.add(rows[new], hashes[new], given)
        truth.update({rows[i].tobytes(): int(v) for i, v in zip(new, given, strict=True)})
        assert len(index) == len(truth)
    assert len(truth) > 2000 and repeated > 1000


def test_a_row_that_differs_in_one_code_is_not_found():
    index = KeyIndex()
    row = np.arange(12, dtype=np.int32).reshape(1, 12)
    _, found, hashes = index.find(row)
    assert not found.any()
    index.add(row, hashes, np.array([41]))
    other = row.copy()
    other[0, 11] += 1
    values, found, _ = index.find(np.concatenate([other, row]))
    assert found.tolist() == [False, True] and int(values[1]) == 41


def test_an_empty_batch_finds_nothing_and_adds_nothing():
    index = KeyIndex()
    values, found, hashes = index.find(np.empty((0, 12), dtype=np.int32))
    assert len(values) == len(found) == len(hashes) == 0
    index.add(np.empty((0, 12), dtype=np.int32), hashes, values)
    assert len(index) == 0
