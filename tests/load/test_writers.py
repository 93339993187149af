"""Batch writers: runs partitioned by release, JSON lines as concatenated zstd frames."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from kindex_etl.load import layout, writers
from kindex_etl.load.writers import (
    JsonLinesWriter,
    ParquetTableWriter,
    RowGroupWriter,
    RunsWriter,
    compact_dictionaries,
    take_compact,
)
from tests.helpers import read_jsonl_zst

SCHEMA = pa.schema([("liger_version", pa.string()), ("n", pa.int64())])


def _runs(versions: list[str], start: int) -> pa.Table:
    return pa.table({"liger_version": versions, "n": range(start, start + len(versions))}, SCHEMA)


def test_runs_writer_one_file_per_release_rows_and_documents_kept(tmp_path: Path) -> None:
    writer = RunsWriter(tmp_path, "b1", SCHEMA)
    writer.write(_runs(["0.8.0", "0.8.1", "0.8.0"], 0), pa.array(['{"a":0}\n', "{}\n", "{}\n"]))
    writer.write(_runs(["0.8.1"], 3), pa.array(['{"a":3}\n']))
    files = {f.key: f for f in writer.close()}
    assert set(files) == {
        layout.runs_key("b1", "0.8.0", 0),
        layout.runs_key("b1", "0.8.1", 0),
        layout.documents_key(layout.RUNS, "b1"),
    }
    v080 = pq.read_table(files[layout.runs_key("b1", "0.8.0", 0)].path)
    assert v080.column("n").to_pylist() == [0, 2]  # input order kept within a release
    assert files[layout.runs_key("b1", "0.8.1", 0)].rows == 2
    docs = read_jsonl_zst(files[layout.documents_key(layout.RUNS, "b1")].path)
    assert docs == [{"a": 0}, {}, {}, {"a": 3}]


def test_a_releases_file_rolls_over_to_its_next_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Row groups of 2 runs, a new part every 3 row groups: 13 runs of one release make parts
    # of 6, 6 and 1 runs; the other release's one file is untouched.
    monkeypatch.setattr(writers, "ROW_GROUP_ROWS", 2)
    monkeypatch.setattr(writers, "ROW_GROUPS_PER_FILE", 3)
    writer = RunsWriter(tmp_path, "b1", SCHEMA)
    for n in range(13):
        writer.write(_runs(["0.8.0"], n), pa.array(["{}\n"]))
    writer.write(_runs(["0.7.0"], 100), pa.array(["{}\n"]))
    files = {f.key: f for f in writer.close()}
    parts = [layout.runs_key("b1", "0.8.0", n) for n in range(3)]
    assert set(files) == {
        *parts,
        layout.runs_key("b1", "0.7.0", 0),
        layout.documents_key(layout.RUNS, "b1"),
    }
    assert [files[k].rows for k in parts] == [6, 6, 1]
    assert [pq.ParquetFile(files[k].path).metadata.num_row_groups for k in parts] == [3, 3, 1]
    # Part after part, the release's runs in the order written; a reader of the release's
    # folder (DuckDB here) sees every run once.
    in_parts = [n for k in parts for n in pq.read_table(files[k].path).column("n").to_pylist()]
    assert in_parts == list(range(13))
    folder = tmp_path / "benchmark_runs" / "release=0.8.0"
    got = duckdb.sql(f"SELECT count(*), count(DISTINCT n) FROM read_parquet('{folder}/*.parquet')")
    assert got.fetchall() == [(13, 13)]


def test_an_ended_releases_rows_go_out_without_waiting_for_a_full_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # History moves through releases: 0.7.0's last 50 rows must not wait in memory for rows
    # that will not come, while 0.8.0's keep filling their row group.
    monkeypatch.setattr(writers, "ROW_GROUP_ROWS", 1000)
    writer = RunsWriter(tmp_path, "b1", SCHEMA)
    for n in range(5):
        writer.write(_runs(["0.7.0"] * 10, 10 * n), pa.array(["{}\n"] * 10))
    for n in range(writers.IDLE_WRITES - 1):
        writer.write(_runs(["0.8.0"] * 10, 100 + 10 * n), pa.array(["{}\n"] * 10))
        assert writer.buffered_rows == 50 + 10 * (n + 1)  # 0.7.0 not idle long enough yet
    writer.write(_runs(["0.8.0"] * 10, 200), pa.array(["{}\n"] * 10))
    assert writer.buffered_rows == 10 * writers.IDLE_WRITES  # 0.8.0's only
    files = {f.key: f for f in writer.close()}
    old = pq.ParquetFile(files[layout.runs_key("b1", "0.7.0", 0)].path)
    assert old.metadata.num_row_groups == 1
    assert old.read().column("n").to_pylist() == list(range(50))


def test_row_group_writer_gathers_small_writes_into_row_groups(tmp_path: Path) -> None:
    writer = RowGroupWriter(ParquetTableWriter(tmp_path, "q.parquet", SCHEMA), rows=10)
    for n in range(25):
        writer.write(_runs(["0.8.0"] * 3, 3 * n))
    writer.write(_runs([], 0))  # an empty write adds no row group
    written = writer.close()
    assert written is not None and written.rows == 75
    meta = pq.ParquetFile(written.path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [12] * 6 + [3]
    assert pq.read_table(written.path).column("n").to_pylist() == list(range(75))


def test_row_group_writer_bounds_what_waits_by_bytes(tmp_path: Path) -> None:
    one = _runs(["0.8.0"] * 100, 0)
    writer = RowGroupWriter(
        ParquetTableWriter(tmp_path, "q.parquet", SCHEMA), rows=10_000, max_bytes=2 * one.nbytes
    )
    for _ in range(5):
        writer.write(one)
    written = writer.close()
    assert written is not None
    meta = pq.ParquetFile(written.path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [200, 200, 100]


def test_json_lines_writer_writes_a_sliced_array_exactly(tmp_path: Path) -> None:
    writer = JsonLinesWriter(tmp_path, "d.jsonl.zst")
    lines = pa.array(['{"x":1}\n', '{"x":2}\n', '{"x":3}\n']).slice(1, 2)
    writer.write_lines(lines)
    written = writer.close()
    assert written is not None and written.rows == 2
    assert read_jsonl_zst(written.path) == [{"x": 2}, {"x": 3}]


def test_parquet_writer_writes_nothing_until_a_table_comes(tmp_path: Path) -> None:
    writer = ParquetTableWriter(tmp_path, "t/part-x.parquet", SCHEMA)
    assert writer.close() is None and not (tmp_path / "t").exists()
    writer = ParquetTableWriter(tmp_path, "t/part-x.parquet", SCHEMA)
    writer.write(_runs(["0.8.0"], 7))
    written = writer.close()
    assert written is not None and pq.read_table(written.path).column("n").to_pylist() == [7]


def test_batches_with_their_own_dictionaries_stay_dictionary_encoded(tmp_path: Path) -> None:
    # Each normalized batch carries its own dictionary; Parquet's writer, meeting a second
    # dictionary in one row group, wrote the rest of the column chunk as plain pages.
    text = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema([("liger_version", text), ("s", text)])
    writer = RunsWriter(tmp_path, "b1", schema)
    expected: list[str] = []
    for start in range(0, 40, 10):
        words = pa.array([f"series-{i:04d}" for i in range(start, start + 10)])
        codes = pa.array([i % 10 for i in range(300)], pa.int32())
        versions = pa.DictionaryArray.from_arrays(pa.array([0] * 300, pa.int32()), ["0.8.0"])
        table = pa.table([versions, pa.DictionaryArray.from_arrays(codes, words)], schema=schema)
        writer.write(table, pa.array(["{}\n"] * 300))
        expected += [f"series-{start + i % 10:04d}" for i in range(300)]
    files = {f.key: f for f in writer.close()}
    path = files[layout.runs_key("b1", "0.8.0", 0)].path
    column = pq.ParquetFile(path).metadata.row_group(0).column(1)
    assert column.path_in_schema == "s"
    plain_bytes = sum(4 + len(s) for s in expected)
    assert column.total_uncompressed_size < plain_bytes / 4
    assert pq.read_table(path).column("s").to_pylist() == expected


def test_only_the_columns_written_as_dictionaries_get_dictionary_pages(tmp_path: Path) -> None:
    # Per-row distinct text (names, external ids): a dictionary would be built and dropped.
    schema = pa.schema([("s", pa.dictionary(pa.int32(), pa.string())), ("t", pa.string())])
    writer = ParquetTableWriter(tmp_path, "t.parquet", schema)
    codes = pa.array([i % 3 for i in range(600)], pa.int32())
    writer.write(
        pa.table(
            [
                pa.DictionaryArray.from_arrays(codes, ["a", "b", "c"]),
                pa.array([f"row-{i % 5}" for i in range(600)]),
            ],
            schema=schema,
        )
    )
    written = writer.close()
    assert written is not None
    group = pq.ParquetFile(written.path).metadata.row_group(0)
    assert "RLE_DICTIONARY" in group.column(0).encodings
    assert "RLE_DICTIONARY" not in group.column(1).encodings
    assert pq.read_table(written.path).column("t").to_pylist()[:6] == [
        "row-0", "row-1", "row-2", "row-3", "row-4", "row-0",
    ]  # fmt: skip


def test_a_releases_buffered_rows_keep_only_the_dictionary_entries_they_use(
    tmp_path: Path,
) -> None:
    # A block mixing releases is split by release; each part's dictionaries are cut down to
    # the entries it uses, so a rare release's buffer does not pin every block's dictionary.
    text = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema([("liger_version", pa.string()), ("s", text), ("n", pa.int64())])
    words = pa.array([f"descriptor-{i:05d}" for i in range(1000)])
    codes = pa.array([i if i % 7 else None for i in range(1000)], pa.int32())
    table = pa.table(
        [pa.array(["0.8.0"] * 999 + ["0.1.1"]), pa.DictionaryArray.from_arrays(codes, words),
         pa.array(range(1000))],
        schema=schema,
    )  # fmt: skip
    rare = compact_dictionaries(table.slice(994).combine_chunks().take(pa.array([4, 0, 3])))
    column = rare.column("s").chunk(0)
    assert rare.schema == schema and len(column.dictionary) == 2  # was 1000
    assert rare.column("s").to_pylist() == ["descriptor-00998", None, "descriptor-00997"]
    assert rare.column("n").to_pylist() == [998, 994, 997]

    writer = RunsWriter(tmp_path, "b1", schema)
    writer.write(table, pa.array(["{}\n"] * 1000))
    pending = writer._pending["0.1.1"].tables[0].column("s").chunk(0)
    assert len(pending.dictionary) == 1 and pending.to_pylist() == ["descriptor-00999"]


def test_take_compact_remaps_columns_sharing_one_index_array_like_a_plain_take() -> None:
    # The normalizer's descriptor columns are dictionaries over one index array: they are
    # taken and remapped once, and must read back exactly as a plain take of each column.
    codes = pa.array([i % 50 if i % 11 else None for i in range(400)], pa.int32())
    head = pa.DictionaryArray.from_arrays(codes, pa.array([f"h{i}" for i in range(50)]))
    tail = pa.DictionaryArray.from_arrays(codes, pa.array([f"t{i}" for i in range(50)]))
    own = pa.array([i % 3 for i in range(400)], pa.int32())
    other = pa.DictionaryArray.from_arrays(own, pa.array(["a", "b", "c"]))
    table = pa.table({"head": head, "tail": tail, "other": other, "n": pa.array(range(400))})
    rows = np.array([399, 3, 11, 3, 250, 0], dtype=np.int64)

    out = take_compact(table, rows)
    plain = table.take(pa.array(rows))
    assert out.schema == table.schema and out.to_pylist() == plain.to_pylist()
    # Only the entries the rows use are kept; a column using its whole dictionary keeps it.
    assert out.column("head").chunk(0).dictionary.to_pylist() == ["h0", "h3", "h49"]  # was 50
    assert out.column("tail").chunk(0).dictionary.to_pylist() == ["t0", "t3", "t49"]
    assert out.column("head").null_count == 2  # rows 11 and 0
    assert len(out.column("other").chunk(0).dictionary) == 3
    # A column with several chunks takes the general path and reads back the same.
    split = pa.table({"head": pa.chunked_array([head.slice(0, 200), head.slice(200)])})
    assert take_compact(split, rows).to_pylist() == split.take(pa.array(rows)).to_pylist()


def test_runs_files_carry_statistics_where_readers_prune_by_them(tmp_path: Path) -> None:
    # min/max of ids, digests and descriptors skip no row group (their values span all of
    # them) and cost ~10 % of the write: those columns have no statistics. The rest keep
    # theirs (a column of nulls too: its null count), and a filter on either kind still finds
    # its rows.
    import duckdb

    from kindex_etl.catalog import default_catalog
    from kindex_etl.contracts.tables import RUN_WRITE_SCHEMA, has_statistics
    from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
    from kindex_etl.demo import sample_rows
    from kindex_etl.normalize.columnar import ColumnarNormalizer

    rows = sample_rows()
    batch = pa.RecordBatch.from_pydict(
        {c: pa.array([r[c] for r in rows], pa.string()) for c in UPSTREAM_COLUMNS}
    )
    out = ColumnarNormalizer(default_catalog()).normalize(
        batch, source_key="k", source_etag="e", lines=np.arange(2, len(rows) + 2)
    )
    writer = RunsWriter(tmp_path, "b1", RUN_WRITE_SCHEMA)
    writer.write(out.runs, out.json_lines)
    parquet = [f.path for f in writer.close() if f.key.endswith(".parquet")]
    assert parquet
    unsummarized = {f.name for f in RUN_WRITE_SCHEMA if not has_statistics(f)}
    assert {"external_id", "series_id", "workload_descriptor"} <= unsummarized
    assert not {"observed_at", "kernel", "gpu_name", "value_median"} & unsummarized
    for path in parquet:
        group = pq.ParquetFile(path).metadata.row_group(0)
        for i in range(group.num_columns):
            column = group.column(i)
            summarized = column.statistics is not None
            assert summarized == (column.path_in_schema not in unsummarized), column
    external = out.runs.column("external_id")[0].as_py()
    first = out.runs.column("observed_at")[0].as_py()
    files = [str(p) for p in parquet]
    con = duckdb.connect()
    found = con.execute(
        "SELECT count(*) FROM read_parquet($files) WHERE external_id = $e",
        {"files": files, "e": external},
    ).fetchone()
    assert found == (1,)
    since = con.execute(
        "SELECT count(*) FROM read_parquet($files) WHERE observed_at >= $t",
        {"files": files, "t": first},
    ).fetchone()
    expected = pc.sum(pc.greater_equal(out.runs.column("observed_at"), pa.scalar(first))).as_py()
    assert since == (expected,)
