"""Replay held-back rows through the same normalizer, typically after a catalog update."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .catalog import Catalog, default_catalog
from .extract.read import RowBatch
from .load import layout
from .load.commit import Warehouse
from .normalize.rows import UPSTREAM_COLUMNS
from .pipeline import (
    FILE_LEVEL_REASONS,
    Ingestor,
    Source,
    commit_sources,
    open_warehouse,
)
from .summary import IngestSummary


def _open_files(warehouse: Warehouse) -> list[str]:
    replayed = {k for r in warehouse.records for k in r.get("replayed_files", [])}
    return [k for k in warehouse.files(layout.QUARANTINE) if k not in replayed]


def _read(warehouse: Warehouse, keys: list[str]) -> pa.Table | None:
    batch_of = {f["key"]: r["batch"] for r in warehouse.records for f in r.get("files", [])}
    parts = [warehouse.read_file(batch_of[k], k, None) for k in keys]
    return pa.concat_tables(parts) if parts else None


def open_quarantine(warehouse_url: str) -> pa.Table:
    """Every row or file that is held back now (not yet replayed successfully)."""
    from .normalize.tables import QUARANTINE_SCHEMA

    warehouse = open_warehouse(warehouse_url)
    warehouse.refresh()
    table = _read(warehouse, _open_files(warehouse))
    return table if table is not None else QUARANTINE_SCHEMA.empty_table()


def replay(warehouse_url: str, *, catalog: Catalog | None = None) -> IngestSummary:
    warehouse = open_warehouse(warehouse_url)
    summary = IngestSummary(upstream="(quarantine)", warehouse=warehouse.store.url)
    warehouse.refresh()
    ingestor = Ingestor(warehouse, catalog or default_catalog())
    versions_before = ingestor.existing_versions()
    files = _open_files(warehouse)
    table = _read(warehouse, files)
    if table is None or table.num_rows == 0:
        return summary
    fixed = pc.is_in(table.column("reason"), pa.array(sorted(FILE_LEVEL_REASONS)))
    carry = table.filter(fixed)
    rows = table.filter(pc.invert(fixed))

    def sources() -> list[Source]:
        out = []
        groups = rows.group_by(["source_key", "source_etag", "software"]).aggregate([])
        for g in groups.to_pylist():
            mask = pc.and_(
                pc.and_(
                    pc.equal(rows.column("source_key"), g["source_key"]),
                    pc.equal(rows.column("source_etag"), g["source_etag"]),
                ),
                pc.equal(rows.column("software"), g["software"]),
            )
            part = rows.filter(mask)

            def batches(part: pa.Table = part) -> Iterator[RowBatch]:
                batch = part.select(list(UPSTREAM_COLUMNS)).combine_chunks().to_batches()
                lines = part.column("source_row").to_numpy(zero_copy_only=False).astype(np.int64)
                if batch:
                    yield RowBatch(batch=batch[0], lines=lines)

            out.append(
                Source(
                    key=g["source_key"],
                    etag=g["source_etag"],
                    software=g["software"],
                    batches=batches,
                    replay=True,
                )
            )
        return out

    commit_sources(
        ingestor,
        sources,
        summary,
        salt="replay:" + ",".join(files),
        replayed_files=lambda: files,
        carry=carry,
    )
    summary.quarantined_rows += carry.num_rows
    summary.rows_read = rows.num_rows
    new = ingestor.existing_versions() - versions_before
    summary.new_versions = sorted(new)
    return summary
