"""What is announced: every committed alert and retraction, from the log, once per id."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from kindex_etl.analysis.alerts import EVENT, RETRACTED_EVENT
from kindex_etl.analysis.announce import (
    announced_through,
    pending,
    record_announced,
    start_announcing,
)
from kindex_etl.analysis.run import run_regressions
from kindex_etl.api import IngestOptions, ingest
from kindex_etl.load.record import COMPACT
from kindex_etl.load.warehouse import Warehouse
from kindex_etl.maintenance.compaction import compact
from kindex_etl.storage import open_store
from tests.analysis.helpers import alert_no_longer_found, build_warehouse, series_rows
from tests.helpers import write_csv

STEP = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]


def _add_series(tmp_path: Path, warehouse: str, name: str, x: str) -> None:
    up = tmp_path / f"{name}-up"
    write_csv(up / "benchmarks/more/benchmark.csv", series_rows(STEP, x=x, day=3))
    ingest(str(up), warehouse, IngestOptions(trigger=False))


def test_an_analysis_commit_is_announced_until_the_mark_passes_it(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP), series_rows(STEP, x="4096", day=2)])
    store = open_store(wh)
    assert start_announcing(store) == 1
    result = run_regressions(wh, report=False)
    assert result.commit == 2 and len(result.new_alerts) == 2

    first = pending(store)
    assert first.through == 2 and [e["event"] for e in first.events] == [EVENT, EVENT]
    assert {e["payload"]["change_id"] for e in first.events} == {
        c["change_id"] for c in result.new_alerts
    }
    # Asked again before the mark moved (a crash after emitting): the same events, same ids.
    again = pending(store)
    assert [e["id"] for e in again.events] == [e["id"] for e in first.events]
    assert len({e["id"] for e in first.events}) == 2

    record_announced(store, first.through)
    assert announced_through(store) == 2
    assert pending(store).events == []
    assert start_announcing(store) == 2  # a mark is never moved by starting


def test_alerts_committed_by_any_command_after_the_mark_are_announced(tmp_path: Path) -> None:
    """An analysis outside the flow (the CLI, the demo) commits alerts; the next announcement
    tells them, though its own analysis found nothing new."""
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    store = open_store(wh)
    start_announcing(store)
    run_regressions(wh, report=False)
    record_announced(store, pending(store).through)

    _add_series(tmp_path, wh, "b", "4096")
    silent = run_regressions(wh, report=False)  # committed, nobody told
    assert len(silent.new_alerts) == 1
    nothing_new = run_regressions(wh, report=False)
    assert nothing_new.commit is None

    told = pending(store)
    assert [e["payload"]["change_id"] for e in told.events] == [silent.new_alerts[0]["change_id"]]


def test_without_a_mark_the_history_before_the_start_is_not_announced(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    store = open_store(wh)
    run_regressions(wh, report=False)  # an older warehouse: alerts, no mark
    assert pending(store).events == []  # no mark: nothing is pending
    _add_series(tmp_path, wh, "b", "4096")
    assert start_announcing(store) == 3
    own = run_regressions(wh, report=False)
    told = pending(store)
    assert [e["payload"]["change_id"] for e in told.events] == [own.new_alerts[0]["change_id"]]


def test_a_compaction_of_the_regressions_table_announces_nothing_again(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    store = open_store(wh)
    start_announcing(store)
    run_regressions(wh, report=False)
    _add_series(tmp_path, wh, "b", "4096")
    run_regressions(wh, report=False)
    assert len(pending(store).events) == 2
    record_announced(store, pending(store).through)

    done = compact(wh, target_rows=1_000_000)
    assert done.commit is not None
    warehouse = Warehouse(store)
    warehouse.refresh()
    record = warehouse.record(done.commit)
    assert record.kind == COMPACT
    assert any(k.startswith("regressions/") for k in record.retires)
    assert pending(store).events == []


def test_a_retracted_alert_is_announced_with_what_it_was(tmp_path: Path) -> None:
    wh, old = alert_no_longer_found(tmp_path)
    store = open_store(wh)
    start_announcing(store)
    result = run_regressions(wh, report=False)
    (row,) = result.retracted
    assert row["retracted_state"] == "alert"

    (told,) = pending(store).events
    assert told["event"] == RETRACTED_EVENT
    assert told["payload"]["change_id"] == old["change_id"]
    assert told["payload"]["retracted_state"] == "alert"
    # The table says it too, for readers who were not listening.
    warehouse = Warehouse(store)
    warehouse.refresh()
    (key,) = [f.key for f in warehouse.record(result.commit).files if f.key.endswith(".parquet")]
    stored = pq.read_table(Path(wh) / key, columns=["state", "retracted_state"]).to_pylist()
    assert stored == [{"state": "retracted", "retracted_state": "alert"}]


def test_records_behind_a_checkpoint_and_files_of_older_code_are_read(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    store = open_store(wh)
    record_announced(store, 1)
    result = run_regressions(wh, report=False)
    warehouse = Warehouse(store)
    warehouse.refresh()
    assert warehouse.maybe_checkpoint(interval=1) == result.commit
    # Written before `retracted_state` existed: the column is missing from the file.
    (key,) = [f.key for f in warehouse.record(result.commit).files if f.key.endswith(".parquet")]
    path = Path(wh) / key
    pq.write_table(pq.read_table(path).drop_columns(["retracted_state"]), path)

    told = pending(store)  # a fresh reader starts from the checkpoint, past commit 2
    assert [e["payload"]["change_id"] for e in told.events] == [result.new_alerts[0]["change_id"]]
