"""Replay held-back rows through the same normalizer, typically after a catalog update."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.catalog import Catalog, default_catalog
from kindex_etl.contracts.tables import QUARANTINE_SCHEMA
from kindex_etl.contracts.upstream import DEVICE_TIME_COLUMNS, UPSTREAM_COLUMNS
from kindex_etl.contracts.versions import sort_versions
from kindex_etl.extract.read import RowBatch
from kindex_etl.ingestion.batch import Ingestor, Source, held_keys
from kindex_etl.ingestion.commit import commit_sources
from kindex_etl.ingestion.results import IngestSummary
from kindex_etl.load import layout
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.normalize.quarantine import FILE_LEVEL_REASONS


def _open_files(warehouse: Warehouse) -> list[str]:
    replayed = warehouse.replayed_files()
    return [k for k in warehouse.files(layout.QUARANTINE) if k not in replayed]


def _read(warehouse: Warehouse, keys: list[str]) -> pa.Table | None:
    batch_of = warehouse.batch_of()
    parts = [warehouse.read_file(batch_of[k], k, None) for k in keys]
    # Files written before the device-time columns existed read them as null.
    return pa.concat_tables(parts, promote_options="permissive") if parts else None


def open_quarantine_of(warehouse: Warehouse) -> pa.Table:
    """Every row or file that is held back now (not yet replayed successfully)."""
    table = _read(warehouse, _open_files(warehouse))
    return table if table is not None else QUARANTINE_SCHEMA.empty_table()


def open_quarantine(warehouse_url: str) -> pa.Table:
    """Every row or file held back now in the warehouse at `warehouse_url` (creates nothing)."""
    warehouse = open_warehouse(warehouse_url, create=False)
    warehouse.refresh()
    return open_quarantine_of(warehouse)


def sources_of(rows: pa.Table) -> list[Source]:
    """One source per (object version, host software) the held-back rows came from."""
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
            # A device-time row's own columns where the rows have them (empty where unknown).
            present = [c for c in DEVICE_TIME_COLUMNS if c in part.column_names]
            rows = part.select([*UPSTREAM_COLUMNS, *present])
            for c in present:
                i = rows.schema.get_field_index(c)
                rows = rows.set_column(i, c, pc.fill_null(rows.column(c), ""))
            batch = rows.combine_chunks().to_batches()
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


def replay(warehouse_url: str, *, catalog: Catalog | None = None) -> IngestSummary:
    """Run the open held-back rows through the current catalog, in one commit."""
    warehouse = open_warehouse(warehouse_url, create=False)
    summary = IngestSummary(upstream="(quarantine)", warehouse=warehouse.store.url)
    warehouse.refresh()
    ingestor = Ingestor(warehouse, catalog or default_catalog())
    versions_before = warehouse.versions()
    files = _open_files(warehouse)
    table = _read(warehouse, files)
    if table is None or table.num_rows == 0:
        return summary
    fixed = pc.is_in(table.column("reason"), pa.array(sorted(FILE_LEVEL_REASONS)))
    carry = table.filter(fixed)
    rows = table.filter(pc.invert(fixed))
    outcome = commit_sources(
        ingestor,
        lambda: sources_of(rows),
        salt="replay:" + ",".join(files),
        replayed_files=lambda: files,
        carry=carry,
        # A replay that changes nothing commits nothing: no record, no quarantine file.
        unchanged_if=Counter(held_keys(rows)),
    )
    summary.add(outcome.reports, outcome.reasons)
    if outcome.commit is not None:
        summary.commits.append(outcome.commit)
    summary.quarantined_rows += carry.num_rows
    summary.rows_read = rows.num_rows
    summary.new_versions = sort_versions(set(outcome.versions) - versions_before)
    return summary
