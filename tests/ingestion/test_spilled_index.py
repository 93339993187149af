"""The run index with its frozen chunks spilled to temporary files, through real ingests."""

from __future__ import annotations

import shutil
from pathlib import Path

from kindex_etl import IngestOptions, ingest
from kindex_etl.ingestion import run as run_module
from kindex_etl.normalize import dedup
from tests.helpers import SAMPLE_CSV
from tests.warehouse import assert_same_files, data_objects, without_batch


def _ingest(up: Path, wh: Path):
    run_module.forget_ingestor()  # a fresh process: the index is built from the warehouse
    return ingest(str(up), str(wh), IngestOptions(trigger=False))


def test_a_spilled_index_writes_the_same_warehouse_and_finds_redelivered_rows(
    tmp_path, monkeypatch
):
    # Small frozen chunks and CSV blocks: the sample's 2,448 runs freeze (and spill) several
    # times within one ingest, and again when a new process loads the stored index.
    monkeypatch.setattr(dedup, "FROZEN_RUNS", 300)
    real_read = run_module.read_batches
    monkeypatch.setattr(
        run_module, "read_batches", lambda store, key: real_read(store, key, block_size=32 << 10)
    )
    up = tmp_path / "up" / "benchmark" / "data"
    up.mkdir(parents=True)
    shutil.copy(SAMPLE_CSV, up / "all_benchmark_data.csv")

    monkeypatch.setenv("KINDEX_INDEX_SPILL", "0")
    assert _ingest(tmp_path / "up", tmp_path / "memory").runs_written == 2448
    monkeypatch.setenv("KINDEX_INDEX_SPILL", "1")
    assert _ingest(tmp_path / "up", tmp_path / "spilled").runs_written == 2448
    index = run_module._ingestor[2].index  # type: ignore[index]
    assert index.spill and len(index._spilled) >= 4 and not index._frozen

    def files(name: str) -> dict[str, bytes]:
        return {without_batch(k): v for k, v in data_objects(str(tmp_path / name)).items()}

    assert_same_files(files("spilled"), files("memory"))

    # The same rows again under another name (a re-delivery): every one a duplicate of a run
    # the new process only knows from its spilled start-up index.
    shutil.copy(up / "all_benchmark_data.csv", up / "again.csv")
    again = _ingest(tmp_path / "up", tmp_path / "spilled")
    assert again.runs_written == 0 and again.duplicate_rows == 2448
    index = run_module._ingestor[2].index  # type: ignore[index]
    assert len(index._spilled) >= 4 and len(index) == 2448
