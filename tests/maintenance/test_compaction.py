"""Compaction: delta-rs rewrites small files into large ones, one commit records it, readers
undisturbed."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import IngestOptions, ingest, open_quarantine
from kindex_etl.errors import StorageError
from kindex_etl.load import layout
from kindex_etl.load.faults import SimulatedCrash, crash_at
from kindex_etl.load.warehouse import open_warehouse
from kindex_etl.maintenance import compact, vacuum
from kindex_etl.storage import open_store
from tests.maintenance import hourly_upstream, ingest_hourly, read_snapshot, run_ids, view
from tests.warehouse import data_objects, keys_under, log_records

HOURS = 6
STEPS = (
    "compact_after_delta",
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
    files = len(read_snapshot(wh)["tables"][layout.RUNS])
    for target in (13, 25, 40):  # runs files hold 6 rows per release and commit here
        compact(wh, target_rows=target)
        runs = read_snapshot(wh)["tables"][layout.RUNS]
        assert len(runs) < files  # small files merged...
        files = len(runs)
        records = log_records(wh)
        assert compact(wh, target_rows=target).commit is None  # ...and merged files stay
        assert log_records(wh) == records
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
    # Crashed before its commit, it is made again; after it, nothing is left to do.
    assert (result.commit is None) == (step not in ("compact_after_delta", "compact_after_stage"))
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

    real_stage = compact_module.stage_documents
    raced = []

    def stage_then_someone_commits(warehouse, groups, batch):
        staged = real_stage(warehouse, groups, batch)
        if not raced:  # an hourly ingest commits (and publishes) while the compaction writes
            raced.append(batch)
            hourly_upstream(upstream, HOURS + 1)
            ingest_hourly(upstream, wh)
        return staged

    monkeypatch.setattr(compact_module, "stage_documents", stage_then_someone_commits)
    result = compact(wh)
    assert result.commit is not None and raced
    after = read_snapshot(wh)
    assert set(_per_partition(after).values()) == {1}
    assert len(run_ids(view(wh, after))) == (HOURS + 1) * 12
    assert keys_under(wh, f"{layout.STAGING}{raced[0]}/") == set()


def test_an_ingest_published_between_delta_rs_and_the_record_starts_it_over(
    small_files, monkeypatch
):
    """The ingest's publish lists the old files again over delta-rs's compaction (the same
    rows): the difference no longer holds at the head, so nothing of it is recorded, and the
    compaction runs again from the new head."""
    from deltalake import DeltaTable

    upstream, wh = small_files
    import kindex_etl.maintenance.compaction as compact_module

    real = compact_module.compact_tables
    calls: list[int] = []

    def compact_then_someone_ingests(warehouse, target_rows):
        real(warehouse, target_rows)
        calls.append(warehouse.head)
        if len(calls) == 1:
            hourly_upstream(upstream, HOURS + 1)
            ingest_hourly(upstream, wh)
            runs = DeltaTable(f"{wh}/{layout.RUNS}").to_pyarrow_table(columns=["external_id"])
            assert runs.num_rows == (HOURS + 1) * 12  # every committed run, once

    monkeypatch.setattr(compact_module, "compact_tables", compact_then_someone_ingests)
    result = compact(wh)
    assert len(calls) == 2 and calls[1] == calls[0] + 1
    assert result.commit == calls[1] + 1
    after = read_snapshot(wh)
    assert set(_per_partition(after).values()) == {1}
    assert len(run_ids(view(wh, after))) == (HOURS + 1) * 12
    runs = DeltaTable(f"{wh}/{layout.RUNS}")
    assert sorted(runs.to_pyarrow_table(columns=["external_id"]).column(0).to_pylist()) == (
        run_ids(view(wh, after))
    )
    assert {
        f"{layout.RUNS}/{p}" for p in runs.get_add_actions(True).column("path").to_pylist()
    } == (set(after["tables"][layout.RUNS]))


def test_vacuum_deletes_retired_files_only_after_the_retention(small_files):
    _, wh = small_files
    before = read_snapshot(wh)
    compact(wh)
    assert vacuum(wh).commit is None  # a week's retention: nothing is old enough
    kept = vacuum(wh, retention=timedelta(0))
    snap = read_snapshot(wh)
    assert kept.commit == snap["seq"]
    assert set(data_objects(wh)) == {k for keys in snap["tables"].values() for k in keys}
    # The document listing's superseded files go with the same retention (issue 51).
    listings = {k for k in kept.deleted if k.startswith("document_files/")}
    assert len(listings) >= HOURS and keys_under(wh, "document_files/part-") == {
        k for k in keys_under(wh, "document_files/") if "/_delta_log/" not in k
    }
    assert len(keys_under(wh, "document_files/part-")) == 1
    assert set(kept.deleted) - listings == {
        k for keys in before["tables"].values() for k in keys
    } - {k for keys in snap["tables"].values() for k in keys}
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


def test_every_table_has_a_schema_for_its_delta_table():
    """The bug class of issue 32's `KeyError: 'regressions'`: a table without a schema of its
    own. Each table of the layout (documents aside: they are not Parquet) needs one."""
    from kindex_etl.load import delta

    assert set(layout.TABLES) <= set(delta.schemas())


def test_vacuum_deletes_a_killed_writers_file_only_after_the_retention(small_files):
    """delta-rs's full vacuum: a file in a table's folder that no version lists (a killed
    writer's, a compaction's that never got recorded) goes once it is older than the retention
    and the orphan grace. A younger one may be a writer's that committed and has not published
    yet (found by review: a vacuum under an hour deleted an ingest's committed files)."""
    import os
    import time

    _, wh = small_files
    store = open_store(wh)
    live = read_snapshot(wh)["tables"][layout.RUNS][0]
    stray = f"{layout.RUNS}/{layout.partition_of(live)}/part-killed-writer-00000.parquet"
    fresh = f"{layout.RUNS}/{layout.partition_of(live)}/part-committed-not-published-00000.parquet"
    for key in (stray, fresh):
        store.put_bytes(key, store.get_bytes(live))
    seen = view(wh, read_snapshot(wh))
    vacuum(wh)  # a week's retention: the stray file is minutes old
    assert store.head(stray) is not None
    hours_ago = time.time() - 2 * 3600  # older than the grace (an hour)
    os.utime(Path(wh) / stray, (hours_ago, hours_ago))
    result = vacuum(wh, retention=timedelta(0))
    assert store.head(stray) is None and stray in result.deleted
    assert store.head(fresh) is not None  # inside the grace, whatever the retention
    assert view(wh, read_snapshot(wh)) == seen


def test_a_grace_under_an_hour_is_not_rounded_down_to_none(small_files, monkeypatch):
    """Found by review: delta-rs counts whole hours, and half an hour rounded down was 0: the
    full vacuum then deleted a file a writer had just committed and not yet published."""
    _, wh = small_files
    monkeypatch.setenv("KINDEX_ORPHAN_GRACE_S", "1800")
    store = open_store(wh)
    live = read_snapshot(wh)["tables"][layout.RUNS][0]
    fresh = f"{layout.RUNS}/{layout.partition_of(live)}/part-committed-not-published-00000.parquet"
    store.put_bytes(fresh, store.get_bytes(live))
    vacuum(wh, retention=timedelta(minutes=30))
    assert store.head(fresh) is not None


def test_vacuum_refuses_while_a_compaction_is_not_recorded(small_files):
    """Found by review: after delta-rs compacted and before the record (a crash), the Delta
    tables have removed files the log still lists as live; a vacuum deleted them and every
    later command failed. It refuses now, and the next compaction records the first."""
    _, wh = small_files
    seen = view(wh, read_snapshot(wh))
    with crash_at("compact_after_delta"), pytest.raises(SimulatedCrash):
        compact(wh)
    with pytest.raises(StorageError, match="compaction not recorded"):
        vacuum(wh, retention=timedelta(0))
    store = open_store(wh)
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    assert all(store.head(k) is not None for k in warehouse.state.live())
    assert compact(wh).commit is not None
    assert vacuum(wh, retention=timedelta(0)).commit is not None
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    assert all(store.head(k) is not None for k in warehouse.state.live())
    assert view(wh, read_snapshot(wh)) == seen


def test_vacuum_forgets_the_quarantine_files_a_replay_settled(tmp_path):
    """A settled quarantine file is live in the kindex log (its history) but not in the
    quarantine's Delta table, so delta-rs's vacuum deletes it: the vacuum's record must take
    it out of the log too, or the next command that reads the quarantine fails."""
    import shutil

    from kindex_etl import replay
    from kindex_etl.maintenance.migrate import migrate

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "warehouse-main-5ae26c4"
    wh = str(tmp_path / "wh")
    shutil.copytree(fixture / "warehouse", wh)
    migrate(wh)
    replay(wh)
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    settled = warehouse.replayed_files() & set(warehouse.files(layout.QUARANTINE))
    assert settled
    held_back = _open_rows(wh)

    vacuum(wh, retention=timedelta(0))

    store = open_store(wh)
    warehouse.refresh()
    assert all(store.head(k) is None for k in settled)
    missing = [k for k in warehouse.state.live() if store.head(k) is None]
    assert missing == []
    assert _open_rows(wh) == held_back
    # Reads every open quarantine file (all still there) and finds nothing more to release.
    assert replay(wh).runs_written == 0


def test_a_release_with_a_local_version_compacts_and_reads_back(tmp_path):
    """delta-rs writes release `0.8.0+cu121` into a folder `release=0.8.0%2Bcu121` and reports
    that escaped again: the record must name the object itself, and its partition value stay
    the release (found by trying it: the first cut refused to record the compaction)."""
    from deltalake import DeltaTable

    from tests.warehouse import put_objects, synthetic_csv

    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    for h in range(3):
        put_objects(upstream, {f"benchmarks/{h}/b.csv": synthetic_csv(["0.8.0+cu121"], day=1 + h)})
    ingest_hourly(upstream, wh)
    with crash_at("compact_after_delta"), pytest.raises(SimulatedCrash):
        compact(wh)  # delta-rs committed; an ingest's publish then lists the old files again
    put_objects(upstream, {"benchmarks/9/b.csv": synthetic_csv(["0.8.0+cu121"], day=9)})
    ingest_hourly(upstream, wh)
    assert compact(wh).commit is not None
    ingest_hourly(upstream, wh)  # nothing new: the record's files are where it says

    store = open_store(wh)
    runs = read_snapshot(wh)["tables"][layout.RUNS]
    assert any("%2B" in k for k in runs) and all(store.head(k) is not None for k in runs)
    # The analysis takes a file's release from its key (found by review: it read the escaped
    # folder name, and ranked the release before every other one).
    assert {layout.release_of(k) for k in runs} == {"0.8.0+cu121"}
    table = DeltaTable(f"{wh}/{layout.RUNS}").to_pyarrow_table(columns=["release", "external_id"])
    assert set(table.column("release").to_pylist()) == {"0.8.0+cu121"}
    assert sorted(table.column("external_id").to_pylist()) == run_ids(view(wh, read_snapshot(wh)))
    assert table.num_rows == 4 * 6


def test_after_compact_and_vacuum_every_table_has_one_file_per_partition(tmp_path):
    """Issue 51: after hourly commits, `compact` and `vacuum`, `document_files` had a file per
    commit (35 hourly commits left 37) where every other table had one per partition: each
    publish replaces its one file, and the superseded ones waited for delta-rs's default week
    whatever the vacuum's retention. Now they go with the retention, and a commit that changes
    no document (the vacuum's own) keeps the live file."""
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    from kindex_etl.load import delta
    from tests.helpers import read_jsonl_zst

    hours = 12
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, hours)
    ingest_hourly(upstream, wh)
    store = open_store(wh)

    def files_per_partition() -> Counter[tuple[str, str]]:
        counts: Counter[tuple[str, str]] = Counter()
        for info in store.list():
            key = info.key
            if key.startswith((layout.CONTROL, layout.REPORTS)) or "/_delta_log/" in key:
                continue
            if key.startswith(delta.DOCUMENT_FILES + "/"):
                counts[delta.DOCUMENT_FILES, ""] += 1
            else:
                counts[layout.table_of(key), layout.partition_of(key)] += 1
        return counts

    before = files_per_partition()
    assert before[delta.DOCUMENT_FILES, ""] >= hours - 2  # one listing per commit with documents
    compact(wh)
    vacuum(wh, retention=timedelta(0))
    after = files_per_partition()
    assert after.keys() == before.keys()
    assert set(after.values()) == {1}, after

    # Every reader gives the same counts as the project's own view.
    expected = run_ids(view(wh, read_snapshot(wh)))
    assert len(expected) == hours * 12
    runs = DeltaTable(f"{wh}/{layout.RUNS}")
    dataset = runs.to_pyarrow_dataset()  # DuckDB finds it by name too
    assert sorted(dataset.to_table(columns=["external_id"]).column(0).to_pylist()) == expected
    assert duckdb.sql("SELECT count(DISTINCT external_id) FROM dataset").fetchall()[0][0] == len(
        expected
    )
    assert pl.scan_delta(f"{wh}/{layout.RUNS}").collect().height == len(expected)
    listing = DeltaTable(f"{wh}/{delta.DOCUMENT_FILES}").to_pyarrow_dataset().to_table().to_pylist()
    run_files = [f for f in listing if f["table"] == layout.RUNS]
    assert sum(f["rows"] for f in run_files) == len(expected)
    docs = [d for f in run_files for d in read_jsonl_zst(Path(wh) / f["path"])]
    assert sorted(d["spec"]["sourceNative"]["externalId"] for d in docs) == expected
