"""The batch's descriptor memory: dropping resolved descriptors mid-ingest changes no output."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import kindex_etl.ingestion.batch as batch_module
from kindex_etl import IngestOptions, ingest
from kindex_etl.ingestion import run as run_module
from tests.helpers import SAMPLE_CSV
from tests.warehouse import assert_same_files, data_objects, without_batch


def _ingest(tmp_path: Path, name: str) -> dict[str, bytes]:
    upstream = tmp_path / "up" / "benchmark" / "data"
    if not upstream.exists():
        upstream.mkdir(parents=True)
        shutil.copy(SAMPLE_CSV, upstream / "all_benchmark_data.csv")
    run_module.forget_ingestor()  # a fresh process: no descriptors resolved yet
    wh = tmp_path / name
    summary = ingest(str(tmp_path / "up"), str(wh), IngestOptions(trigger=False))
    assert summary.runs_written == 2448
    return {without_batch(k): v for k, v in data_objects(str(wh)).items()}


def test_dropping_descriptors_mid_ingest_writes_the_same_warehouse(tmp_path, monkeypatch):
    # Small CSV blocks, in both ingests: many batches, so descriptors are dropped between them
    # and resolved again.
    real_read = run_module.read_batches
    monkeypatch.setattr(
        run_module, "read_batches", lambda store, key: real_read(store, key, block_size=64 << 10)
    )
    whole = _ingest(tmp_path, "whole")
    resets: list[int] = []
    real_reset = batch_module.ColumnarNormalizer.reset_descriptors

    def counted(self: batch_module.ColumnarNormalizer) -> None:
        resets.append(len(self.table.descriptors))
        real_reset(self)

    monkeypatch.setenv("KINDEX_DESCRIPTOR_CAP", "50")
    monkeypatch.setattr(batch_module.ColumnarNormalizer, "reset_descriptors", counted)
    dropped = _ingest(tmp_path, "dropped")
    if len(resets) < 2:
        pytest.fail(f"the cap triggered {len(resets)} time(s): the test would prove little")
    assert_same_files(dropped, whole)


def test_a_batch_runs_under_the_bulk_collector_and_restores_it(tmp_path, monkeypatch):
    """The collector thresholds a batch's stages see (on the builder thread), then the old ones."""
    import gc

    from kindex_etl.memory import BULK_GC_THRESHOLDS
    from kindex_etl.normalize.columnar import PreparedBatch
    from tests.helpers import seed_row, write_csv

    seen: list[tuple[int, int, int]] = []
    real_build = PreparedBatch.build

    def build(self, keep=None):
        seen.append(gc.get_threshold())
        return real_build(self, keep)

    monkeypatch.setattr(PreparedBatch, "build", build)
    thresholds = gc.get_threshold()
    write_csv(tmp_path / "up" / "a.csv", [seed_row()])
    summary = ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert summary.runs_written == 1
    assert seen == [BULK_GC_THRESHOLDS]
    assert gc.get_threshold() == thresholds


def test_without_a_run_index_a_start_up_reads_the_run_files_one_at_a_time(tmp_path, monkeypatch):
    """No checkpoint's run index: every committed key comes from the run files, file by file
    (the whole table's key columns at once held 2.9 GiB for 4.4M runs), and every re-delivered
    row is still a duplicate."""
    from kindex_etl.load import layout
    from kindex_etl.load.warehouse import Warehouse, open_warehouse
    from tests.helpers import row, write_csv

    up, wh = tmp_path / "up", tmp_path / "wh"
    stamps = ("2026-06-10 10:00:00", "2026-06-11 10:00:00", "2026-06-12 10:00:00")
    for i, stamp in enumerate(stamps):
        write_csv(up / f"c{i}.csv", [row(timestamp=stamp)])
        run_module.forget_ingestor()
        assert ingest(str(up), str(wh), IngestOptions(trigger=False)).runs_written == 1
    warehouse = open_warehouse(str(wh))
    warehouse.refresh()
    assert warehouse.run_index() is None  # three commits, no checkpoint yet
    run_files = set(warehouse.state.tables[layout.RUNS])
    assert len(run_files) == 3

    real_table, real_file = Warehouse.read_table, Warehouse.read_file
    read: list[str] = []

    def read_table(self, table, columns=None):
        assert table != layout.RUNS, "the whole runs table read at once"
        return real_table(self, table, columns)

    def read_file(self, batch, key, columns=None):
        read.append(key)
        return real_file(self, batch, key, columns)

    monkeypatch.setattr(Warehouse, "read_table", read_table)
    monkeypatch.setattr(Warehouse, "read_file", read_file)
    write_csv(up / "again.csv", [row(timestamp=stamp) for stamp in stamps])
    run_module.forget_ingestor()  # a fresh process
    again = ingest(str(up), str(wh), IngestOptions(trigger=False))
    assert again.runs_written == 0 and again.duplicate_rows == 3
    assert run_files <= set(read)


def test_a_forgotten_ingestor_is_freed(tmp_path: Path) -> None:
    # The ingest flow drops its process's ingestor before the analysis it chains. It was
    # alive when the first batch froze what was alive (`bulk_collector`), where a reference
    # cycle would never be collected: nothing else may hold it.
    import gc
    import weakref

    from tests.helpers import row, write_csv

    up = tmp_path / "up"
    rows = [row(x_value=str(2**i)) for i in range(5)]
    write_csv(up / "a.csv", rows[:4])
    ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert run_module._ingestor is not None
    held = weakref.ref(run_module._ingestor[2])
    assert gc.get_freeze_count() > 0
    run_module.forget_ingestor()
    assert run_module._ingestor is None
    assert held() is None
    # A next ingest in the process starts a fresh one, which knows the committed runs.
    write_csv(up / "b.csv", rows)
    again = ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert (again.runs_written, again.duplicate_rows) == (1, 4)
    assert run_module._ingestor is not None
