"""The campaign's layout: interleave, run ids, shards and GPUs."""

from __future__ import annotations

import pytest

from kindex_etl.gpu import plan


def test_interleave_alternates_versions_repeat_by_repeat() -> None:
    assert plan.interleave("0.8.5", "0.8.4", 3) == [
        ("0.8.5", 1), ("0.8.4", 1), ("0.8.5", 2), ("0.8.4", 2), ("0.8.5", 3), ("0.8.4", 3),
    ]  # fmt: skip
    assert plan.interleave("0.8.5", None, 2) == [("0.8.5", 1), ("0.8.5", 2)]
    with pytest.raises(ValueError, match="repeats"):
        plan.interleave("0.8.5", "0.8.4", 0)


def test_each_version_and_repeat_has_its_own_run_id() -> None:
    one = plan.slots("C", "0.8.5", "0.8.4", 2)
    assert [s.run_id for s in one] == ["C-0.8.5-r1", "C-0.8.4-r1", "C-0.8.5-r2", "C-0.8.4-r2"]
    sharded = {s.run_id for i in range(3) for s in plan.slots("C", "0.8.5", "0.8.4", 2, (i, 3))}
    assert len(sharded) == 12  # shards upload apart


def test_balance_puts_the_heaviest_first_on_the_lightest_bin() -> None:
    weights = [("a", 10.0), ("b", 7.0), ("c", 5.0), ("d", 3.0), ("e", 2.0), ("f", 1.0)]
    bins = plan.balance(weights, 2)
    assert bins == [["a", "d", "f"], ["b", "c", "e"]]  # loads 14 and 14
    eight = plan.balance(weights, 8)
    assert [len(b) for b in eight] == [1, 1, 1, 1, 1, 1, 0, 0]


def test_shards_cover_every_script_exactly_once() -> None:
    weights = [(f"k{i}", float(i % 5 + 1)) for i in range(23)]
    shards = [plan.shard(weights, i, 4) for i in range(4)]
    names = [n for s in shards for n in s]
    assert sorted(names) == sorted(n for n, _ in weights)
    with pytest.raises(ValueError, match="shard 4 of 4"):
        plan.shard(weights, 4, 4)
