"""Files carry their statistics: every add action of every Delta table has numRecords, min, max
and null counts from its file's footer, so readers skip files by them; and a filter on a column
without them still reads every row it should (deltalake's dataset drops a file whose stats lack
a stats column's bounds: `file_stats` never writes such stats)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable

from kindex_etl.load import delta, file_stats, layout
from kindex_etl.maintenance import compact
from kindex_etl.storage import LocalStore, open_store
from tests.maintenance import hourly_upstream, ingest_hourly

TABLES = (*delta.PUBLISH_ORDER, delta.DOCUMENT_FILES)
DAY_2 = datetime(2026, 6, 2, tzinfo=UTC)


def _table(wh: str, table: str) -> DeltaTable:
    return DeltaTable(f"{wh}/{table}", storage_options=delta.storage_options(open_store(wh)))


def _adds(dt: DeltaTable) -> list[dict[str, Any]]:
    return pa.table(dt.get_add_actions(flatten=True)).to_pylist()


def _configured(dt: DeltaTable) -> list[str]:
    return dt.metadata().configuration[delta.STATS_COLUMNS].split(",")


def _as_stat(value: Any) -> Any:
    """A file's own min or max as deltalake returns the add action's."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return value


def assert_stats_are_the_files(wh: str) -> int:
    """Every add action of every table: numRecords the file's rows, min/max/nulls its own."""
    store = open_store(wh)
    checked = 0
    for table in TABLES:
        dt = _table(wh, table)
        columns = _configured(dt)
        assert columns == file_stats.stats_columns(delta.schemas()[table])
        for add in _adds(dt):
            data = pq.read_table(pa.py_buffer(store.get_bytes(f"{table}/{add['path']}")))
            assert add["num_records"] == data.num_rows
            for name in columns:
                column = data.column(name)
                if pa.types.is_dictionary(column.type):
                    column = column.cast(column.type.value_type)
                assert add[f"null_count.{name}"] == column.null_count, (table, name)
                if column.null_count == data.num_rows:
                    continue
                bounds = pc.min_max(column).as_py()
                assert _as_stat(add[f"min.{name}"]) == _as_stat(bounds["min"]), (table, name)
                assert _as_stat(add[f"max.{name}"]) == _as_stat(bounds["max"]), (table, name)
            checked += 1
    return checked


def test_every_add_action_carries_its_files_statistics(where):
    upstream, wh = where
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    assert assert_stats_are_the_files(wh) >= 3 * 2 + 3 + 4  # runs, quarantine, dimensions
    runs = _table(wh, layout.RUNS)
    assert "observed_at" in _configured(runs) and "external_id" not in _configured(runs)
    # The protocol's form, as written to the log: timestamps as ISO strings in UTC.
    store = open_store(wh)
    log = store.get_bytes(f"{layout.RUNS}/_delta_log/{runs.version():020d}.json").decode()
    add = next(json.loads(line)["add"] for line in log.splitlines() if '"add"' in line)
    stats = json.loads(add["stats"])
    assert set(stats) == {"numRecords", "minValues", "maxValues", "nullCount"}
    assert stats["minValues"]["observed_at"].endswith("Z")


def _filtered(wh: str, column: str, value: Any) -> dict[str, int]:
    """Rows each reader returns for `column == value`."""
    dt = _table(wh, layout.RUNS)
    dataset = dt.to_pyarrow_dataset()  # noqa: F841 (DuckDB finds it by name)
    polars = pl.scan_delta(f"{wh}/{layout.RUNS}").filter(pl.col(column) == value).collect()
    return {
        "pyarrow": dt.to_pyarrow_dataset().to_table(filter=ds.field(column) == value).num_rows,
        "duckdb": duckdb.sql(
            f"SELECT count(*) FROM dataset WHERE {column} = ?", params=[value]
        ).fetchall()[0][0],
        "polars": polars.height,
    }


def _truth(wh: str) -> pa.Table:
    """Every live runs file read whole, no Delta reader involved."""
    dt = _table(wh, layout.RUNS)
    return pa.concat_tables(
        pq.read_table(f"{wh}/{layout.RUNS}/{p}")
        for p in pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()
    )


def test_readers_skip_files_by_min_and_max_and_miss_no_row(tmp_path):
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 4)
    ingest_hourly(upstream, wh)
    dataset = _table(wh, layout.RUNS).to_pyarrow_dataset()
    early = ds.field("observed_at") < pa.scalar(DAY_2, pa.timestamp("us", tz="UTC"))
    fragments = list(dataset.get_fragments())
    kept = list(dataset.get_fragments(filter=early))
    # 4 commits x 2 releases; only the first hour's two files can hold rows before day 2.
    assert len(fragments) == 8 and len(kept) == 2
    truth = _truth(wh)
    cut = pc.less(truth.column("observed_at"), pa.scalar(DAY_2, pa.timestamp("ms", tz="UTC")))
    assert dataset.to_table(filter=early).num_rows == pc.sum(cut).as_py() == 12
    # A filter on a column with bounds, and on one without (never in a file's stats): every
    # reader returns each row it should.
    for column in ("external_id", "series_id", "source_key", "kernel", "provider"):
        for value in truth.column(column).unique().to_pylist()[:2]:
            want = pc.sum(pc.equal(truth.column(column), value)).as_py()
            assert set(_filtered(wh, column, value).values()) == {want}, (column, value)


def test_a_compactions_files_carry_the_same_statistics(tmp_path):
    """delta-rs writes the compacted files and their adds itself: with the table's stats
    columns, the same as ours."""
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 4)
    ingest_hourly(upstream, wh)
    assert compact(wh).commit is not None
    assert assert_stats_are_the_files(wh) > 0
    runs = _adds(_table(wh, layout.RUNS))
    assert len(runs) == 2 and all("-c000" in a["path"] for a in runs)  # delta-rs's names
    value = _truth(wh).column("external_id")[0].as_py()
    assert set(_filtered(wh, "external_id", value).values()) == {1}


def test_tables_published_before_statistics_get_them_for_new_files(tmp_path, monkeypatch):
    """A table made by an older version (no stats columns, adds with their row count alone)
    gets its stats columns at the next publish; its old files are read, never skipped."""
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 2)
    with monkeypatch.context() as m:
        m.setattr(delta, "_wanted_stats_columns", lambda table: [])
        ingest_hourly(upstream, wh)
    runs = _table(wh, layout.RUNS)
    assert delta.STATS_COLUMNS not in runs.metadata().configuration
    assert all(a.get("min.observed_at") is None for a in _adds(runs))
    hourly_upstream(upstream, 4)
    ingest_hourly(upstream, wh)
    runs = _table(wh, layout.RUNS)
    assert _configured(runs) == file_stats.stats_columns(delta.schemas()[layout.RUNS])
    bounded = [a for a in _adds(runs) if a.get("min.observed_at") is not None]
    assert len(bounded) == 4  # the two new commits' files; the four old ones have none
    dataset = runs.to_pyarrow_dataset()
    late = ds.field("observed_at") >= pa.scalar(DAY_2, pa.timestamp("us", tz="UTC"))
    assert len(list(dataset.get_fragments(filter=late))) == 8  # old files: read, not skipped
    early = ds.field("observed_at") < pa.scalar(DAY_2, pa.timestamp("us", tz="UTC"))
    assert len(list(dataset.get_fragments(filter=early))) == 4
    assert dataset.to_table(filter=early).num_rows == 12
    for column in ("external_id", "kernel"):
        value = _truth(wh).column(column)[0].as_py()
        want = pc.sum(pc.equal(_truth(wh).column(column), value)).as_py()
        assert set(_filtered(wh, column, value).values()) == {want}


# -- the footer's statistics, unit by unit --------------------------------------------------


def _stats_of(table: pa.Table, tmp_path: Path, columns: list[str], **options: Any) -> Any:
    pq.write_table(table, tmp_path / "f.parquet", **options)
    store = LocalStore(tmp_path)
    size = (tmp_path / "f.parquet").stat().st_size
    return file_stats.file_stats(store, "f.parquet", size, columns)


def test_timestamps_are_iso_in_utc_widened_to_whole_milliseconds(tmp_path):
    at = pa.array(
        [1_780_000_000_123_456, 1_780_000_001_000_000, None], pa.timestamp("us", tz="UTC")
    )
    stats = _stats_of(pa.table({"t": at}), tmp_path, ["t"])
    assert stats == {
        "numRecords": 3,
        "minValues": {"t": "2026-05-28T20:26:40.123Z"},  # .123456 rounded down
        "maxValues": {"t": "2026-05-28T20:26:41Z"},
        "nullCount": {"t": 1},
    }
    up = pa.table({"t": pa.array([1_780_000_000_123_456], pa.timestamp("us", tz="UTC"))})
    assert _stats_of(up, tmp_path, ["t"])["maxValues"]["t"] == "2026-05-28T20:26:40.124Z"


def test_values_over_row_groups_nulls_and_dictionaries(tmp_path):
    table = pa.table(
        {
            "n": pa.array([5, None, -3, 9]),
            "s": pa.array(["b", "a", "c", None]).dictionary_encode(),
            "x": pa.array([1.5, float("nan"), -2.0, 0.0]),
            "none": pa.array([None, None, None, None], pa.string()),
            "b": pa.array([True, None, True, True]),
        }
    )
    stats = _stats_of(table, tmp_path, ["n", "s", "x", "none", "b"], row_group_size=2)
    assert stats["numRecords"] == 4
    assert stats["minValues"] == {"n": -3, "s": "a", "x": -2.0, "b": True}
    assert stats["maxValues"] == {"n": 9, "s": "c", "x": 1.5, "b": True}
    assert stats["nullCount"] == {"n": 1, "s": 1, "x": 0, "none": 4, "b": 1}


def test_a_stats_column_without_bounds_leaves_the_row_count_alone(tmp_path):
    """Bounds for some stats columns and none for another would make deltalake's dataset skip
    the file on any filter of that one: all or nothing."""
    table = pa.table({"n": [1, 2], "s": ["a", "b"]})
    assert _stats_of(table, tmp_path, ["n", "s"], write_statistics=["n"]) == {"numRecords": 2}
    assert _stats_of(table, tmp_path, ["n", "s"], write_statistics=["n", "s"])["minValues"] == {
        "n": 1,
        "s": "a",
    }
    assert _stats_of(table, tmp_path, ["n", "gone"]) == {"numRecords": 2}


def test_a_footer_larger_than_one_read_is_read_whole(tmp_path):
    wide = pa.table({f"column_{i:04d}": [i, i + 1] for i in range(1500)})
    pq.write_table(wide, tmp_path / "f.parquet")
    footer = pq.read_metadata(tmp_path / "f.parquet").serialized_size
    assert footer > file_stats.FOOTER_READ
    stats = _stats_of(wide, tmp_path, ["column_0000", "column_1499"])
    assert stats["minValues"] == {"column_0000": 0, "column_1499": 1499}
    assert stats["maxValues"] == {"column_0000": 1, "column_1499": 1500}


def test_stats_columns_are_the_first_32_with_parquet_statistics():
    runs = file_stats.stats_columns(delta.schemas()[layout.RUNS])
    first = [f.name for f in list(delta.schemas()[layout.RUNS])[:32]]
    assert set(runs) <= set(first)
    for name in ("external_id", "series_id", "name", "title", "config", "workload_slug"):
        assert name not in runs  # written without Parquet statistics
    for name in ("observed_at", "kernel", "provider", "gpu_name", "metric", "value_median"):
        assert name in runs
