"""Backfill selection: commit ranges from commits.txt, release tags, key prefixes, time windows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from packaging.version import Version

from kindex_etl.extract.select import Selection, commit_range, find_commit, parse_time, select
from kindex_etl.storage import LocalStore, ObjectInfo


def test_find_commit_by_sha_prefix_folder_or_longer_sha() -> None:
    entries = ["1a2b3c4-v0.8.0", "9f8e7d6", "1a2bfff-v0.8.1"]
    assert find_commit(entries, "1a2b3c4-v0.8.0") == 0
    assert find_commit(entries, "1a2b3c4") == 0
    assert find_commit(entries, "9f8e7d6aa00112233") == 1  # a full SHA finds its short form
    assert find_commit(entries, "9f8e") == 1
    with pytest.raises(ValueError, match="ambiguous"):
        find_commit(entries, "1a2b")
    with pytest.raises(ValueError, match="not in"):
        find_commit(entries, "deadbee")
    with pytest.raises(ValueError, match="not in"):
        find_commit(entries, "1a2")  # too short to be a prefix
    assert commit_range(entries, "9f8e7d6", None) == entries[1:]
    assert commit_range(entries, None, "9f8e7d6") == entries[:2]
    assert commit_range(entries, "1a2bfff", "1a2bfff") == entries[2:]
    with pytest.raises(ValueError, match="comes after"):
        commit_range(entries, "1a2bfff", "1a2b3c4")


def _info(key: str, when: datetime = datetime(2026, 7, 1, tzinfo=UTC)) -> Any:
    return ObjectInfo(key=key, size=1, etag="e", last_modified=when)


def test_selection_filters() -> None:
    cumulative = _info("benchmark/data/all_benchmark_data.csv")
    tagged = _info("benchmarks/1a2b3c4-v0.8.0/benchmark.csv")
    plain = _info("benchmarks/9f8e7d6/benchmark.csv")
    assert all(Selection()(i) for i in (cumulative, tagged, plain))
    by_commit = Selection(commits=frozenset({"9f8e7d6"}))
    assert [by_commit(i) for i in (cumulative, tagged, plain)] == [False, False, True]
    assert by_commit.list_prefix == "benchmarks/"
    by_version = Selection(min_version=Version("0.8.0"), max_version=Version("0.8.0"))
    assert [by_version(i) for i in (cumulative, tagged, plain)] == [False, True, False]
    assert not Selection(min_version=Version("0.8.1"))(tagged)
    assert not Selection(max_version=Version("0.7.9"))(tagged)
    assert Selection(prefix="benchmark/")(cumulative) and not Selection(prefix="benchmark/")(plain)
    since = parse_time("2026-07-01", "since")
    until = parse_time("2026-07-01T12:00:00+02:00", "until")
    assert since == datetime(2026, 7, 1, tzinfo=UTC)
    assert until == datetime(2026, 7, 1, 10, tzinfo=UTC)
    window = Selection(since=since, until=until)
    assert window(_info("a.csv", datetime(2026, 7, 1, tzinfo=UTC)))  # since is included
    assert not window(_info("a.csv", datetime(2026, 7, 1, 10, tzinfo=UTC)))  # until is not
    assert not window(_info("a.csv", datetime(2026, 6, 30, 23, 59, tzinfo=UTC)))
    with pytest.raises(ValueError, match="since"):
        parse_time("yesterday", "since")


def test_select_reads_commits_txt_and_refuses_what_it_cannot_meet(tmp_path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "commits.txt").write_text("# order\n1a2b3c4-v0.8.0\n9f8e7d6\n")
    store = LocalStore(tmp_path)
    selection, entries = select(store, from_commit="9f8e7d6")
    assert entries == ["9f8e7d6"] and selection.commits == frozenset({"9f8e7d6"})
    assert selection(_info("benchmarks/9f8e7d6/benchmark.csv"))
    assert not selection(_info("benchmarks/1a2b3c4-v0.8.0/benchmark.csv"))
    with pytest.raises(ValueError, match="not in"):
        select(store, to_commit="deadbee")
    with pytest.raises(ValueError, match="min_version: not a version"):
        select(store, min_version="eight")
    (tmp_path / "benchmarks" / "commits.txt").unlink()
    with pytest.raises(ValueError, match="not found"):
        select(store, from_commit="9f8e7d6")
