"""The batch's descriptor memory: dropping resolved descriptors mid-ingest changes no output."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import kindex_etl.ingestion.batch as batch_module
from kindex_etl import IngestOptions, ingest
from kindex_etl.ingestion import run as run_module
from tests.warehouse import SAMPLE_CSV, assert_same_files, data_objects, need_shared, without_batch


def _ingest(tmp_path: Path, name: str) -> dict[str, bytes]:
    upstream = tmp_path / "up" / "benchmark" / "data"
    if not upstream.exists():
        upstream.mkdir(parents=True)
        shutil.copy(need_shared(SAMPLE_CSV), upstream / "all_benchmark_data.csv")
    run_module._ingestor = None  # a fresh process: no descriptors resolved yet
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
