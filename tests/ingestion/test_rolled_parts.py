"""A release's runs file rolling over into parts, through a real ingest, snapshot and compaction."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.ingestion import run as run_module
from kindex_etl.load import layout, writers
from kindex_etl.maintenance import compact
from tests.helpers import row, write_csv
from tests.maintenance import read_snapshot, run_ids, view


def test_a_release_rolled_into_parts_is_read_whole_and_compacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CSV blocks of ~25 rows (as 6 MiB blocks are to 64k-run row groups), row groups of 50
    # runs or a few more, a new part every 2 row groups: 600 runs of one release make 5 or 6
    # parts.
    real = run_module.read_batches
    monkeypatch.setattr(
        run_module, "read_batches", lambda store, key: real(store, key, block_size=4096)
    )
    monkeypatch.setattr(writers, "ROW_GROUP_ROWS", 50)
    monkeypatch.setattr(writers, "ROW_GROUPS_PER_FILE", 2)
    rows = [row(timestamp=f"2026-06-11 {i // 60:02d}:{i % 60:02d}:00") for i in range(600)]
    write_csv(tmp_path / "up" / "benchmark" / "data" / "all_benchmark_data.csv", rows)
    wh = str(tmp_path / "wh")
    summary = ingest(str(tmp_path / "up"), wh, IngestOptions(trigger=False))
    assert summary.runs_written == 600

    snap = read_snapshot(wh)
    release = rows[0]["liger_version"]
    run_files = snap["tables"][layout.RUNS]
    assert len(run_files) >= 5
    assert all(f"/release={release}/" in key for key in run_files)
    row_groups = [pq.ParquetFile(Path(wh, key)).metadata.num_row_groups for key in run_files]
    assert max(row_groups) == 2
    seen = run_ids(view(wh, snap))
    assert len(seen) == len(set(seen)) == 600

    # A glob reader of the partition folder sees the same runs, once each.
    folder = Path(wh, layout.RUNS, f"release={release}")
    got = duckdb.sql(
        f"SELECT count(*), count(DISTINCT external_id) FROM read_parquet('{folder}/*.parquet')"
    ).fetchall()
    assert got == [(600, 600)]

    # Compaction folds the parts into one file with the same runs.
    assert compact(wh).commit is not None
    after = read_snapshot(wh)
    assert len(after["tables"][layout.RUNS]) == 1
    assert run_ids(view(wh, after)) == seen
