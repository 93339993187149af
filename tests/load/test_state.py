"""The folded log and its checkpoints: a process starts from the newest checkpoint, same state."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.load import layout
from kindex_etl.load.faults import SimulatedCrash, crash_at
from kindex_etl.load.record import CommitRecord, FileEntry
from kindex_etl.load.state import WarehouseState
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.maintenance import compact, vacuum
from kindex_etl.normalize.columnar import STORED_KEY_COLUMNS, stored_index
from kindex_etl.storage import open_store
from tests.maintenance import hourly_upstream, ingest_hourly


def _folded_from_whole_log(url: str) -> WarehouseState:
    store = open_store(url)
    state = WarehouseState()
    for info in store.list(layout.LOG):
        state.apply(CommitRecord.from_json(store.get_bytes(info.key)))
    return state


class _CountingStore:
    """Counts the objects a process reads while it opens the warehouse."""

    def __init__(self, url: str) -> None:
        self.inner = open_store(url)
        self.url = self.inner.url
        self.reads: list[str] = []

    def get_bytes(self, key: str) -> bytes:
        self.reads.append(key)
        return self.inner.get_bytes(key)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.fixture
def hourly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.setenv("KINDEX_CHECKPOINT_INTERVAL", "3")
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 7)
    ingest_hourly(upstream, wh)
    return upstream, wh


def test_a_checkpoint_every_n_commits_and_start_up_reads_only_the_tail(hourly):
    _, wh = hourly
    store = open_store(wh)
    assert [i.key for i in store.list(layout.CHECKPOINTS)] == [
        layout.checkpoint_key(3),
        layout.run_index_key(3),
        layout.checkpoint_key(6),
        layout.run_index_key(6),
    ]
    counting = _CountingStore(wh)
    warehouse = Warehouse(counting)  # type: ignore[arg-type]
    warehouse.refresh()
    assert counting.reads == [layout.LAST_CHECKPOINT, layout.checkpoint_key(6), layout.log_key(7)]
    assert [r.seq for r in warehouse.records] == [7]
    assert warehouse.head == 7
    assert warehouse.state.to_json() == _folded_from_whole_log(wh).to_json()


def test_checkpoints_hold_what_compaction_and_vacuum_change(hourly):
    _, wh = hourly
    compact(wh)  # commit 8, checkpointed at once (not at 6 + 3): retired files inside
    assert open_store(wh).head(layout.checkpoint_key(8)) is not None
    fresh = open_warehouse(wh)
    fresh.refresh()
    assert fresh.records == [] and fresh.head == 8
    assert fresh.state.retired  # kept for older snapshots, known without the log
    assert fresh.state.to_json() == _folded_from_whole_log(wh).to_json()
    vacuum(wh, retention=timedelta(0))
    again = open_warehouse(wh)
    again.refresh()
    assert not again.state.retired
    assert again.state.to_json() == _folded_from_whole_log(wh).to_json()


def test_a_missing_or_stale_pointer_only_costs_reading_more_of_the_log(hourly, monkeypatch):
    upstream, wh = hourly
    store = open_store(wh)
    store.delete(layout.LAST_CHECKPOINT)
    fresh = open_warehouse(wh)
    fresh.refresh()
    assert len(fresh.records) == 7
    assert fresh.state.to_json() == _folded_from_whole_log(wh).to_json()

    # A crash between writing a checkpoint and moving the pointer: the next start is right.
    hourly_upstream(upstream, 8)
    with crash_at("after_checkpoint"), pytest.raises(SimulatedCrash):
        ingest_hourly(upstream, wh)
    fresh = open_warehouse(wh)
    fresh.refresh()
    assert fresh.head == 8
    assert fresh.state.to_json() == _folded_from_whole_log(wh).to_json()


def _backfill_in_a_new_process(upstream: str, wh: str) -> tuple[int, int]:
    """(runs written, duplicates) of re-reading every object, as a process started afresh."""
    from kindex_etl.ingestion import run as run_module

    run_module.forget_ingestor()  # no run index in memory: it is built from the warehouse
    summary = ingest(upstream, wh, IngestOptions(backfill=True, trigger=False))
    return summary.runs_written, summary.duplicate_rows


def _runs(wh: str) -> int:
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    table = warehouse.read_table(layout.RUNS, ["series_id"])
    return table.num_rows if table is not None else 0


def _run_files(wh: str, *, until: int) -> list[FileEntry]:
    return [
        f
        for r in _log(wh)
        if r.seq <= until
        for f in r.files
        if f.key.startswith("benchmark_runs/")
    ]


def test_a_writer_starts_from_the_checkpoints_run_index_not_the_old_run_files(hourly):
    upstream, wh = hourly
    index = pq.read_table(open_store(wh).local_path(layout.run_index_key(6)))
    assert index.num_rows == sum(f.rows for f in _run_files(wh, until=6))
    total = _runs(wh)
    # The run files of the first six commits are not read at start-up: take them away (kept
    # aside), and a backfill still knows each of their runs, by key and value fingerprint.
    store = open_store(wh)
    aside = {f.key: store.get_bytes(f.key) for f in _run_files(wh, until=6)}
    for key in aside:
        store.delete(key)
    assert _backfill_in_a_new_process(upstream, wh) == (0, total)
    for key, data in aside.items():
        store.put_bytes(key, data)


def test_without_a_usable_run_index_a_writer_reads_every_run_file(hourly):
    upstream, wh = hourly
    total = _runs(wh)
    open_store(wh).delete(layout.run_index_key(6))
    assert _opened(wh).run_index() is None
    assert _backfill_in_a_new_process(upstream, wh) == (0, total)


def test_an_index_with_none_before_it_is_read_file_by_file_and_holds_every_run(hourly):
    # The first checkpoint after a backfill reads each runs file's key columns in turn (all
    # of them at once peaked at ~3 GiB over 4.4M runs): the same rows as all runs at once.
    _, wh = hourly
    store = open_store(wh)
    store.delete(layout.run_index_key(6))
    warehouse = _opened(wh)
    assert warehouse.run_index() is None
    assert len(warehouse.state.tables[layout.RUNS]) > 1
    warehouse._write_run_index(99)
    written = pq.read_table(store.local_path(layout.run_index_key(99)))
    runs = warehouse.read_table(layout.RUNS, STORED_KEY_COLUMNS)
    assert runs is not None

    def rows(table: pa.Table) -> list[tuple[object, ...]]:
        return sorted(zip(*(c.to_pylist() for c in table.columns), strict=True))

    assert written.num_rows == runs.num_rows == _runs(wh)
    assert rows(written) == rows(stored_index(runs))


def test_runs_compacted_since_the_checkpoint_are_known_once(hourly, monkeypatch):
    upstream, wh = hourly
    monkeypatch.setenv("KINDEX_CHECKPOINT_INTERVAL", "100")  # the index stays the one at 6
    with crash_at("compact_before_checkpoint"), pytest.raises(SimulatedCrash):
        compact(wh)  # commit 8: every run file replaced by compacted ones, no checkpoint
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    kept = warehouse.run_index()
    compacted = {f.key for f in _run_files(wh, until=8)} - {f.key for f in _run_files(wh, until=7)}
    # Read besides the index: the compacted files alone (they hold the runs the index has,
    # and the seventh commit's, whose own file is retired).
    assert kept is not None and compacted and set(kept[1]) == compacted
    assert _backfill_in_a_new_process(upstream, wh) == (0, _runs(wh))
    # The next checkpoint's index is built from this one and the files since: each run once.
    monkeypatch.setenv("KINDEX_CHECKPOINT_INTERVAL", "3")
    hourly_upstream(upstream, 8)
    ingest_hourly(upstream, wh)
    newest = open_warehouse(wh)
    newest.refresh()
    assert newest.records == []  # the head is a checkpoint (the backfill committed too)
    index = pq.read_table(open_store(wh).local_path(layout.run_index_key(newest.head)))
    assert index.num_rows == _runs(wh) > 0


def test_only_the_two_newest_run_indexes_are_kept(hourly):
    upstream, wh = hourly
    hourly_upstream(upstream, 9)
    ingest_hourly(upstream, wh)  # commits 8 and 9: a checkpoint at 9
    kept = [i.key for i in open_store(wh).list(layout.CHECKPOINTS) if i.key.endswith(".parquet")]
    assert kept == [layout.run_index_key(6), layout.run_index_key(9)]


def _log(wh: str) -> list[CommitRecord]:
    store = open_store(wh)
    return [CommitRecord.from_json(store.get_bytes(i.key)) for i in store.list(layout.LOG)]


def test_the_run_index_on_s3(tmp_path, s3_bucket, monkeypatch):
    monkeypatch.setenv("KINDEX_CHECKPOINT_INTERVAL", "3")
    upstream, wh = str(tmp_path / "up"), f"s3://{s3_bucket}/wh"
    hourly_upstream(upstream, 4)
    ingest_hourly(upstream, wh)  # a checkpoint at 3, its index beside it
    store = open_store(wh)
    assert store.head(layout.run_index_key(3)) is not None
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    kept = warehouse.run_index()
    assert kept is not None and len(kept[1]) >= 1  # the fourth commit's run files
    assert _backfill_in_a_new_process(upstream, wh) == (0, _runs(wh))
    store.delete(layout.run_index_key(3))
    assert _opened(wh).run_index() is None
    assert _backfill_in_a_new_process(upstream, wh) == (0, _runs(wh))


def _opened(wh: str) -> Warehouse:
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    return warehouse
