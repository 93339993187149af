"""The folded log and its checkpoints: a process starts from the newest checkpoint, same state."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from kindex_etl.load import layout
from kindex_etl.load.faults import SimulatedCrash, crash_at
from kindex_etl.load.record import CommitRecord
from kindex_etl.load.state import WarehouseState
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.maintenance import compact, vacuum
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
        layout.checkpoint_key(6),
    ]
    counting = _CountingStore(wh)
    warehouse = Warehouse(counting)  # type: ignore[arg-type]
    warehouse.refresh()
    assert counting.reads == [layout.LAST_CHECKPOINT, layout.checkpoint_key(6), layout.log_key(7)]
    assert [r.seq for r in warehouse.records] == [7]
    assert warehouse.head == 7
    assert warehouse.state.to_json() == _folded_from_whole_log(wh).to_json()


def test_checkpoints_hold_what_compaction_and_vacuum_change(hourly):
    upstream, wh = hourly
    compact(wh)  # commit 8
    hourly_upstream(upstream, 8)
    ingest_hourly(upstream, wh)  # commit 9: a checkpoint (6 + 3), retired files inside
    assert open_store(wh).head(layout.checkpoint_key(9)) is not None
    fresh = open_warehouse(wh)
    fresh.refresh()
    assert fresh.records == [] and fresh.head == 9
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
