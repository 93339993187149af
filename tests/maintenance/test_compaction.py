"""Compaction: one commit that rewrites small files into large ones, readers undisturbed."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import IngestOptions, ingest, open_quarantine
from kindex_etl.load import layout
from kindex_etl.load.faults import SimulatedCrash, crash_at
from kindex_etl.load.warehouse import open_warehouse
from kindex_etl.maintenance import compact, vacuum
from kindex_etl.maintenance.compaction import plan
from kindex_etl.storage import open_store
from tests.maintenance import hourly_upstream, ingest_hourly, read_snapshot, run_ids, view
from tests.warehouse import data_objects, keys_under, log_records

HOURS = 6
STEPS = (
    "compact_after_stage",
    "compact_after_commit",
    "mid_publish",
    "compact_after_publish",
    "compact_before_checkpoint",
)


@pytest.fixture
def small_files(tmp_path: Path) -> tuple[str, str]:
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, HOURS)
    ingest_hourly(upstream, wh)
    return upstream, wh


def _per_partition(snap: dict[str, Any]) -> Counter[tuple[str, str]]:
    return Counter(
        (table, layout.partition_of(k)) for table, keys in snap["tables"].items() for k in keys
    )


def _open_rows(wh: str) -> list[tuple[Any, ...]]:
    q = open_quarantine(wh)
    return sorted(
        zip(*(q.column(c).to_pylist() for c in ("source_key", "source_row")), strict=True)
    )


def test_compaction_keeps_every_row_and_retires_the_small_files(small_files):
    _, wh = small_files
    before = read_snapshot(wh)
    assert max(_per_partition(before).values()) == HOURS  # one file per commit and partition
    seen_before, open_before = view(wh, before), _open_rows(wh)
    assert len(run_ids(seen_before)) == HOURS * 12 and len(open_before) == HOURS

    result = compact(wh)

    after = read_snapshot(wh)
    assert result.commit == after["seq"] == before["seq"] + 1
    assert set(_per_partition(after).values()) == {1}
    assert _per_partition(after).keys() == _per_partition(before).keys()
    assert view(wh, after) == seen_before
    assert _open_rows(wh) == open_before
    record = log_records(wh)[-1]
    assert record["kind"] == "compact" and not record.get("objects")
    counts = _per_partition(before)
    retired = {
        k
        for t, keys in before["tables"].items()
        for k in keys
        if counts[t, layout.partition_of(k)] > 1
    }
    assert set(record["retires"]) == retired  # a table's only file is left as it is
    # Retired files stay for readers of older snapshots until vacuum: the old one still reads.
    assert view(wh, before) == seen_before


def test_a_compaction_checkpoints_so_start_ups_read_none_of_its_files(small_files):
    _, wh = small_files
    result = compact(wh)
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    kept = warehouse.run_index()
    assert warehouse.head == result.commit and warehouse.records == []
    assert kept is not None and kept[1] == []  # nothing read besides the index
    assert kept[0].num_rows == len(run_ids(view(wh, read_snapshot(wh)))) == HOURS * 12


def test_the_daily_compaction_checkpoints_even_with_nothing_to_merge(small_files):
    # A backfill's files are already large: nothing merges, and without a checkpoint every
    # start-up re-read them until `checkpoint_interval` more commits came.
    _, wh = small_files
    result = compact(wh, target_rows=1)
    assert result.commit is None  # every file holds at least one row: nothing to merge
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    kept = warehouse.run_index()
    assert warehouse.records == [] and warehouse.head == HOURS
    assert kept is not None and kept[1] == []  # nothing read besides the index
    assert kept[0].num_rows == len(run_ids(view(wh, read_snapshot(wh))))
    again = log_records(wh)
    assert compact(wh, target_rows=1).commit is None and log_records(wh) == again


def test_compacting_compacted_data_changes_nothing(small_files):
    _, wh = small_files
    assert compact(wh).commit is not None
    objects, records = data_objects(wh), log_records(wh)
    again = compact(wh)
    assert again.commit is None and again.files_before == again.files_after
    assert data_objects(wh) == objects and log_records(wh) == records


def test_packing_is_a_fixed_point_whatever_the_target(small_files):
    _, wh = small_files
    for target in (13, 25, 40):  # runs files hold 6 rows per release and commit here
        compact(wh, target_rows=target)
        warehouse = open_warehouse(wh)
        warehouse.refresh()
        assert plan(warehouse.state, target) == []
        sizes = [f.rows for f in warehouse.state.tables[layout.RUNS].values()]
        assert all(r <= target for r in sizes if r < target)
    assert len(run_ids(view(wh, read_snapshot(wh)))) == HOURS * 12


def test_ingest_after_compaction_sees_every_run_as_a_duplicate(small_files):
    upstream, wh = small_files
    compact(wh)
    seen = view(wh, read_snapshot(wh))
    again = ingest(upstream, wh, IngestOptions(trigger=False, backfill=True))
    assert again.runs_written == 0 and again.duplicate_rows == HOURS * 12
    assert view(wh, read_snapshot(wh))["tables"][layout.RUNS] == seen["tables"][layout.RUNS]


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_leaves_exact_snapshots_and_the_next_run_finishes(
    small_files, step, monkeypatch
):
    upstream, wh = small_files
    before = read_snapshot(wh)
    seen, open_before = view(wh, before), _open_rows(wh)
    with crash_at(step), pytest.raises(SimulatedCrash):
        compact(wh)

    during = read_snapshot(wh)
    # The snapshot names only whole, published files: before the compaction or after it.
    assert during["seq"] in (before["seq"], before["seq"] + 1)
    assert view(wh, during) == seen and view(wh, before) == seen
    assert _open_rows(wh) == open_before

    # The next compaction finishes it (or, crashed before its commit, makes it again).
    result = compact(wh, orphan_grace=timedelta(hours=1))
    after = read_snapshot(wh)
    assert view(wh, after) == seen and _open_rows(wh) == open_before
    assert set(_per_partition(after).values()) == {1}
    kinds = Counter(r.get("kind", "ingest") for r in log_records(wh))
    assert kinds["compact"] == 1, kinds
    assert keys_under(wh, layout.STAGING) == set()
    assert result.commit is None or step == "compact_after_stage"
    # Its checkpoint too: start-ups read the run index, not the compacted files.
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    assert all(r.kind != "compact" for r in warehouse.records)
    # And the warehouse takes new data as usual.
    hourly_upstream(upstream, HOURS + 1)
    ingest_hourly(upstream, wh)
    assert len(run_ids(view(wh, read_snapshot(wh)))) == (HOURS + 1) * 12


def test_a_compaction_that_loses_a_commit_race_plans_again(small_files, monkeypatch):
    upstream, wh = small_files
    import kindex_etl.maintenance.compaction as compact_module

    real_stage = compact_module.stage_groups
    raced = []

    def stage_then_someone_commits(warehouse, groups, batch):
        record = real_stage(warehouse, groups, batch)
        if not raced:  # an hourly ingest commits while the compaction writes
            raced.append(batch)
            hourly_upstream(upstream, HOURS + 1)
            ingest_hourly(upstream, wh)
        return record

    monkeypatch.setattr(compact_module, "stage_groups", stage_then_someone_commits)
    result = compact(wh)
    assert result.commit is not None and raced
    after = read_snapshot(wh)
    assert set(_per_partition(after).values()) == {1}
    assert len(run_ids(view(wh, after))) == (HOURS + 1) * 12
    assert keys_under(wh, f"{layout.STAGING}{raced[0]}/") == set()


def test_vacuum_deletes_retired_files_only_after_the_retention(small_files):
    _, wh = small_files
    before = read_snapshot(wh)
    compact(wh)
    assert vacuum(wh).commit is None  # a week's retention: nothing is old enough
    kept = vacuum(wh, retention=timedelta(0))
    snap = read_snapshot(wh)
    assert kept.commit == snap["seq"]
    assert set(data_objects(wh)) == {k for keys in snap["tables"].values() for k in keys}
    assert set(kept.deleted) == {k for keys in before["tables"].values() for k in keys} - {
        k for keys in snap["tables"].values() for k in keys
    }
    assert vacuum(wh, retention=timedelta(0)).commit is None
    assert len(run_ids(view(wh, snap))) == HOURS * 12


def test_a_vacuum_crash_leaves_live_files_and_the_next_vacuum_finishes(small_files, monkeypatch):
    _, wh = small_files
    compact(wh)
    seen = view(wh, read_snapshot(wh))
    with crash_at("vacuum_mid_delete"), pytest.raises(SimulatedCrash):
        vacuum(wh, retention=timedelta(0))
    assert view(wh, read_snapshot(wh)) == seen
    assert vacuum(wh, retention=timedelta(0)).commit is not None
    snap = read_snapshot(wh)
    assert set(data_objects(wh)) == {k for keys in snap["tables"].values() for k in keys}
    assert view(wh, snap) == seen


def test_compaction_and_vacuum_on_s3(tmp_path, s3_bucket):
    upstream, wh = str(tmp_path / "up"), f"s3://{s3_bucket}/wh"
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    before = read_snapshot(wh)
    seen = view(wh, before)
    assert compact(wh).commit is not None
    assert view(wh, read_snapshot(wh)) == seen == view(wh, before)
    assert vacuum(wh, retention=timedelta(0)).commit is not None
    snap = read_snapshot(wh)
    store = open_store(wh)
    live = {k for keys in snap["tables"].values() for k in keys}
    assert set(data_objects(wh)) == live
    assert {i.key for i in store.list() if not i.key.startswith(layout.CONTROL)} >= live
    assert view(wh, snap) == seen


def test_every_table_has_a_write_schema_for_compaction():
    """The bug class of issue 32's `KeyError: 'regressions'`: a table compaction cannot write.
    Each table of the layout (documents aside: they are not Parquet) needs one."""
    from kindex_etl.maintenance.compaction import WRITE_SCHEMAS

    assert set(layout.TABLES) <= set(WRITE_SCHEMAS)
