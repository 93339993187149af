"""The tables as Delta tables: every engine's Delta reader sees exactly what is committed.

Readers here use no kindex-etl code to read (only `delta.storage_options` for the S3 endpoint,
which a reader would pass themselves): deltalake, DuckDB over deltalake's dataset, Polars'
`scan_delta`, pandas; the committed truth they are compared with is the kindex log folded.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from kindex_etl import IngestOptions, ingest
from kindex_etl.ingestion.reprocess import reprocess
from kindex_etl.load import delta, layout
from kindex_etl.load.faults import SimulatedCrash, crash_at
from kindex_etl.load.warehouse import open_warehouse
from kindex_etl.maintenance import compact, vacuum
from kindex_etl.maintenance.migrate import migrate
from kindex_etl.storage import open_store
from tests.helpers import read_jsonl_zst
from tests.maintenance import hourly_upstream, ingest_hourly
from tests.warehouse import log_records

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "warehouse-main-5ae26c4"
DIMENSIONS = (layout.PROTOCOLS, layout.ENVIRONMENTS, layout.WORKLOADS, layout.IMPLEMENTATIONS)
DIGEST_COLUMNS = {
    layout.PROTOCOLS: "protocol_digest",
    layout.ENVIRONMENTS: "environment_digest",
    layout.WORKLOADS: "workload_digest",
    layout.IMPLEMENTATIONS: "implementation_digest",
}


def uri(wh: str, table: str) -> str:
    return f"{wh.rstrip('/')}/{table}"


def options(wh: str) -> dict[str, str] | None:
    return delta.storage_options(open_store(wh))


def committed_ids(wh: str) -> list[str]:
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    runs = warehouse.read_table(layout.RUNS, ["external_id"])
    assert runs is not None
    return sorted(runs.column("external_id").to_pylist())


def _head(wh: str) -> int:
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    return warehouse.head


def readers(wh: str) -> dict[str, list[str]]:
    """The runs' external ids as each engine's Delta reader returns them."""
    table = DeltaTable(uri(wh, layout.RUNS), storage_options=options(wh))
    dataset = table.to_pyarrow_dataset()  # noqa: F841 (DuckDB finds it by name)
    out = {
        "deltalake": table.to_pyarrow_table(columns=["external_id"]).column(0).to_pylist(),
        "pandas": table.to_pandas(columns=["external_id"])["external_id"].tolist(),
        "duckdb": [r[0] for r in duckdb.sql("SELECT external_id FROM dataset").fetchall()],
        "polars": pl.scan_delta(uri(wh, layout.RUNS), storage_options=options(wh))
        .select("external_id")
        .collect()["external_id"]
        .to_list(),
    }
    return {name: sorted(ids) for name, ids in out.items()}


def assert_readers_exact(wh: str) -> list[str]:
    expected = committed_ids(wh)
    assert expected and len(set(expected)) == len(expected)
    for name, got in readers(wh).items():
        assert got == expected, name
    run_docs = sum(
        f["rows"]
        for f in DeltaTable(uri(wh, delta.DOCUMENT_FILES), storage_options=options(wh))
        .to_pyarrow_table()
        .to_pylist()
        if f["table"] == layout.RUNS
    )
    assert run_docs == len(expected)
    return expected


def test_every_reader_sees_exactly_the_committed_runs_through_compaction_and_vacuum(where):
    upstream, wh = where
    hourly_upstream(upstream, 4)
    ingest_hourly(upstream, wh)
    before = assert_readers_exact(wh)

    result = compact(wh)
    assert result.commit is not None
    assert assert_readers_exact(wh) == before
    # What the docs warn about: the retired files are still there for a glob to count twice.
    if not wh.startswith("s3://"):
        glob = ds.dataset(Path(wh) / layout.RUNS, format="parquet", partitioning="hive")
        assert glob.count_rows() > len(before)

    assert vacuum(wh, retention=timedelta(0)).deleted
    assert assert_readers_exact(wh) == before
    # The daily upkeep left every table checkpointed at its current version.
    for table in (*DIMENSIONS, layout.RUNS):
        dt = DeltaTable(uri(wh, table), storage_options=options(wh))
        assert dt.transaction_version(delta.LOG_APP) == _head(wh)


@pytest.mark.parametrize(
    "point",
    [
        "compact_after_delta",
        "compact_after_stage",
        "compact_after_commit",
        "mid_publish",
        "compact_after_publish",
    ],
)
def test_readers_stay_exact_through_a_compaction_that_crashed(tmp_path, point):
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    before = assert_readers_exact(wh)
    with crash_at(point), pytest.raises(SimulatedCrash):
        compact(wh)
    assert readers(wh)["deltalake"] == before  # the old files, whole: never both
    compact(wh)  # the next one finishes (or redoes) it
    assert assert_readers_exact(wh) == before
    files = DeltaTable(uri(wh, layout.RUNS)).file_uris()
    assert len(files) == 2  # one compacted file per release


def test_each_upstream_object_version_is_in_the_runs_commits(where):
    upstream, wh = where
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    runs = DeltaTable(uri(wh, layout.RUNS), storage_options=options(wh))
    objects = [o for r in log_records(wh) for o in r.get("objects", [])]
    assert len(objects) == 3
    for o in objects:
        assert runs.transaction_version(delta.object_app_id(o["key"], o["etag"])) == 1
    assert runs.transaction_version(delta.object_app_id(objects[0]["key"], "other-etag")) is None


@pytest.mark.parametrize(
    "point", ["after_stage", "after_commit", "mid_publish", "after_publish", "mid_delta"]
)
def test_a_crash_at_each_write_step_leaves_tables_readable_and_the_next_run_completes(
    tmp_path, point
):
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 2)
    ingest(upstream, wh, IngestOptions(trigger=False, prefix="benchmarks/0000/"))
    first = committed_ids(wh)
    with crash_at(point), pytest.raises(SimulatedCrash):
        ingest(upstream, wh, IngestOptions(trigger=False))
    # Every table readable, each at the first batch or (those published before the crash)
    # at the second; the runs a reader sees name no digest the dimension tables lack.
    runs_at = DeltaTable(uri(wh, layout.RUNS)).transaction_version(delta.LOG_APP)
    assert runs_at == 1
    assert sorted(readers(wh)["deltalake"]) == first
    if point == "mid_delta":  # the first table is one batch ahead, the rest not yet
        protocols = DeltaTable(uri(wh, layout.PROTOCOLS))
        assert protocols.transaction_version(delta.LOG_APP) == 2
        assert DeltaTable(uri(wh, layout.IMPLEMENTATIONS)).transaction_version(delta.LOG_APP) == 1
    _assert_no_dangling_digest(wh)

    # The next run (with orphaned staging removed at once) completes the second batch.
    ingest(upstream, wh, IngestOptions(trigger=False, orphan_grace=timedelta(0)))
    head = _head(wh)
    assert head == 2
    for table in (*DIMENSIONS, layout.RUNS, layout.QUARANTINE, delta.DOCUMENT_FILES):
        assert DeltaTable(uri(wh, table)).transaction_version(delta.LOG_APP) == head, table
    assert len(assert_readers_exact(wh)) > len(first)
    _assert_no_dangling_digest(wh)


def _assert_no_dangling_digest(wh: str) -> None:
    runs = DeltaTable(uri(wh, layout.RUNS)).to_pyarrow_table(columns=list(DIGEST_COLUMNS.values()))
    for table, column in DIGEST_COLUMNS.items():
        known = set(
            DeltaTable(uri(wh, table)).to_pyarrow_table(columns=["digest"]).column(0).to_pylist()
        )
        assert set(runs.column(column).to_pylist()) <= known, table


def test_a_stale_publisher_never_adds_back_what_a_newer_commit_retired(tmp_path, monkeypatch):
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    stale = open_warehouse(wh)
    stale.refresh()
    stale_state = stale.state.copy()
    old_version = DeltaTable(uri(wh, layout.RUNS)).version()
    compact(wh)
    expected = committed_ids(wh)

    # Pretend the stale publisher read the runs table before the compaction's publish and is
    # one log state behind it: its diff would add back the small files the compaction retired.
    original = delta.open_table
    calls: list[int] = []

    def behind(store: Any, table: str, options: Any = None) -> DeltaTable | None:
        if table == layout.RUNS and not calls:
            calls.append(1)
            return DeltaTable(uri(wh, table), version=old_version)
        return original(store, table, options)

    monkeypatch.setattr(delta, "open_table", behind)
    stale_state.seq = _head(wh)  # as if this state were the newest
    delta._publish_table(
        open_store(wh),
        layout.RUNS,
        stale_state.tables[layout.RUNS],
        [delta.Transaction(delta.LOG_APP, stale_state.seq)],
    )
    assert calls  # it did read the old version, lost the commit, re-read, and let it be
    assert readers(wh)["deltalake"] == expected


def _strip_delta(wh: Path) -> None:
    for log in wh.rglob("_delta_log"):
        shutil.rmtree(log)
    shutil.rmtree(wh / delta.DOCUMENT_FILES, ignore_errors=True)
    (wh / delta.PUBLISHED).unlink(missing_ok=True)


@pytest.mark.parametrize("made_by", ["main-5ae26c4", "today-before-delta"])
def test_migrate_publishes_an_older_warehouse_once(tmp_path, made_by):
    wh = tmp_path / "wh"
    if made_by == "main-5ae26c4":
        shutil.copytree(FIXTURE / "warehouse", wh)
    else:
        hourly_upstream(str(tmp_path / "up"), 2)
        ingest_hourly(str(tmp_path / "up"), str(wh))
        _strip_delta(wh)
    data_before = sorted(p.relative_to(wh) for p in wh.rglob("*.parquet"))
    assert not DeltaTable.is_deltatable(str(wh / layout.RUNS))

    first = migrate(str(wh))
    assert first.published and first.seq == _head(str(wh))
    expected = assert_readers_exact(str(wh))
    second = migrate(str(wh))
    assert not second.published and second.tables == first.tables
    assert committed_ids(str(wh)) == expected
    # No data file was written or rewritten; only the Delta logs and the document listing.
    data_after = sorted(
        p.relative_to(wh)
        for p in wh.rglob("*.parquet")
        if delta.DOCUMENT_FILES not in p.parts and "_delta_log" not in p.parts
    )
    assert data_after == data_before
    docs = {
        f["path"] for f in DeltaTable(str(wh / delta.DOCUMENT_FILES)).to_pyarrow_table().to_pylist()
    }
    assert docs and all((wh / p).is_file() for p in docs)
    assert sum(len(read_jsonl_zst(wh / p)) for p in docs if "/benchmark_runs/" in p) == len(
        expected
    )


def test_reprocess_of_a_migrated_5ae26c4_warehouse_reads_exactly_through_delta(tmp_path):
    wh = tmp_path / "wh"
    shutil.copytree(FIXTURE / "warehouse", wh)
    migrate(str(wh))
    assert len(assert_readers_exact(str(wh))) == 41
    report = reprocess(str(wh))
    assert report.runs_after == 51 and report.held_after == 1
    # Every file the reprocess retired has left the Delta tables; its new files are in them.
    assert len(assert_readers_exact(str(wh))) == 51
    held = DeltaTable(str(wh / layout.QUARANTINE)).to_pyarrow_table(columns=["reason"])
    assert held.column("reason").to_pylist() == ["unknown_gpu"]
    _assert_no_dangling_digest(str(wh))


def test_migrate_refuses_a_url_that_holds_no_warehouse(tmp_path):
    with pytest.raises(Exception, match="no warehouse"):
        migrate(str(tmp_path / "nothing-here"))
    assert not (tmp_path / "nothing-here").exists()


def test_a_column_new_to_the_contract_joins_the_delta_schema(tmp_path, monkeypatch):
    """Newer code adds a runs column: the table's Delta schema gains it, and the files written
    before it read as null there (nothing rewritten)."""
    from kindex_etl.contracts import tables

    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 2)
    ingest(upstream, wh, IngestOptions(trigger=False, prefix="benchmarks/0000/"))
    extended = tables.RUN_SCHEMA.append(pa.field("added_later", pa.string()))
    monkeypatch.setattr(tables, "RUN_SCHEMA", extended)
    ingest(upstream, wh, IngestOptions(trigger=False))
    runs = DeltaTable(uri(wh, layout.RUNS))
    assert "added_later" in [f.name for f in runs.schema().fields]
    got = runs.to_pyarrow_table(columns=["external_id", "added_later"])
    assert got.num_rows == len(committed_ids(wh))
    assert got.column("added_later").null_count == got.num_rows


def test_vacuum_never_deletes_a_file_a_lagging_delta_log_still_lists(tmp_path, monkeypatch):
    """Found by review: a compaction whose Delta publish failed (a transient S3 error) left
    the runs' Delta log listing retired files, and the vacuum deleted them."""
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    runs_uri = f"{wh}/{layout.RUNS}"
    expected = DeltaTable(runs_uri).to_pyarrow_table(columns=["external_id"]).num_rows

    real = delta._publish_table

    def flaky(store, name, files, txns, options=None):
        if name == layout.RUNS:
            raise OSError("Generic S3 error: 503 Slow Down")
        return real(store, name, files, txns, options)

    monkeypatch.setattr(delta, "_publish_table", flaky)
    with pytest.raises(OSError):
        compact(wh)
    monkeypatch.setattr(delta, "_publish_table", real)
    assert DeltaTable(runs_uri).to_pyarrow_table().num_rows == expected  # still fine

    # The daily vacuum, stopped after its first delete: it published the compaction to the
    # Delta logs before deleting anything, so no Delta log lists a deleted file.
    with crash_at("vacuum_mid_delete"), pytest.raises(SimulatedCrash):
        vacuum(wh, retention=timedelta(0))
    dt = DeltaTable(runs_uri)
    assert dt.transaction_version(delta.LOG_APP) is not None
    assert dt.to_pyarrow_table(columns=["external_id"]).num_rows == expected


def test_rows_a_replay_settles_are_never_in_neither_table(tmp_path, monkeypatch):
    """Found by review: with the quarantine published before the runs, a publish stopped
    between them left the settled rows in no table. Now in both, until the publish ends."""
    from kindex_etl import replay
    from kindex_etl.load import warehouse as warehouse_module

    wh = tmp_path / "wh"
    shutil.copytree(FIXTURE / "warehouse", wh)
    migrate(str(wh))

    def counts() -> tuple[int, int]:
        runs = DeltaTable(str(wh / layout.RUNS)).to_pyarrow_table(columns=["external_id"])
        held = DeltaTable(str(wh / layout.QUARANTINE)).to_pyarrow_table(columns=["reason"])
        return runs.num_rows, held.num_rows

    runs0, held0 = counts()

    class Stop(Exception):
        pass

    def stop_after_runs(table: str) -> None:
        if table == layout.RUNS:
            raise Stop

    monkeypatch.setattr(warehouse_module, "_delta_fault_point", stop_after_runs)
    with pytest.raises(Stop):
        replay(str(wh))
    assert counts() == (runs0 + 10, held0)  # the 10 dyt_beta rows: in both for now
    monkeypatch.undo()
    migrate(str(wh))  # any later command finishes the publish
    assert counts() == (runs0 + 10, held0 - 10)
