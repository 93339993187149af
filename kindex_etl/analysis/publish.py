"""Write changes through the warehouse's commit protocol (the only module that touches it).

Stage `regressions/part-<batch>.parquet` and `documents/regressions/part-<batch>.jsonl.zst`,
commit one record (its files, no upstream objects), publish, advance the snapshot:
the same steps, guarantees and recovery as an ingest batch. A lost commit race re-reads the
log and recomputes what is new.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..load import layout
from ..load.record import CommitRecord, FileEntry
from ..load.warehouse import Warehouse
from ..storage import ObjectStore, PreconditionFailed, StorageError
from .schema import REGRESSIONS_SCHEMA, change_document

ATTEMPTS = 5
DOCUMENTS = f"documents/{layout.REGRESSIONS}"
STAGE_CHUNK = 4096  # rows made whole (run ids attached) and written at a time
Attach = Callable[[Sequence[dict[str, Any]]], Iterator[dict[str, Any]]]


def _whole(rows: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return iter(rows)


def known_states(warehouse: Warehouse) -> dict[str, str]:
    """change_id -> its latest committed state."""
    # The live files in commit order (`records` starts at the newest checkpoint, so it may
    # not hold them all): a later file's state wins.
    latest: dict[str, str] = {}
    for f in warehouse.state.tables.get(layout.REGRESSIONS, {}).values():
        table = warehouse.read_file(f.batch, f.key, ["change_id", "state"])
        for cid, state in zip(
            table.column("change_id").to_pylist(), table.column("state").to_pylist(), strict=True
        ):
            latest[cid] = state
    return latest


def commit_changes(
    store: ObjectStore,
    rows: list[dict[str, Any]],
    *,
    analysed_seq: int,
    attach: Attach = _whole,
) -> tuple[int | None, list[dict[str, Any]]]:
    """Commit the rows whose (change, state) is new; returns (commit seq or None, those rows).

    `attach`: gives rows back whole, where `rows` leave out their run-id lists
    (`Analysis.full_changes`); the files are written from it a chunk at a time.
    """
    warehouse = Warehouse(store)
    for _ in range(ATTEMPTS):
        warehouse.refresh()
        known = known_states(warehouse)
        new = [
            {**r, "warehouse_seq": analysed_seq}
            for r in rows
            if known.get(r["change_id"]) != r["state"]
        ]
        if not new:
            return None, []
        digest = hashlib.sha256(
            json.dumps(
                [warehouse.head, analysed_seq, sorted(r["change_id"] + r["state"] for r in new)]
            ).encode()
        ).hexdigest()[:16]
        batch = f"r{digest}"
        # A record with files and no upstream objects: ingests read none of it as "done", and
        # the regressions table's rows say which commit they analysed (`warehouse_seq`).
        record = CommitRecord(batch=batch, files=_stage(warehouse, batch, new, attach))
        try:
            seq = warehouse.commit(record)
        except PreconditionFailed:
            warehouse.discard(batch)
            continue
        warehouse.publish(warehouse.records[-1])
        warehouse.update_snapshot()
        return seq, new
    raise StorageError(f"gave up after {ATTEMPTS} commit conflicts on {store.url}")


def _stage(
    warehouse: Warehouse, batch: str, rows: list[dict[str, Any]], attach: Attach
) -> list[FileEntry]:
    with tempfile.TemporaryDirectory(prefix=f"kindex-{batch}-") as tmp:
        parquet = Path(tmp, "changes.parquet")
        docs = Path(tmp, "changes.jsonl.zst")
        with (
            pq.ParquetWriter(parquet, REGRESSIONS_SCHEMA, compression="zstd") as table_out,
            pa.CompressedOutputStream(str(docs), "zstd") as docs_out,
        ):
            for start in range(0, len(rows), STAGE_CHUNK):
                whole = list(attach(rows[start : start + STAGE_CHUNK]))
                table_out.write_table(pa.Table.from_pylist(whole, schema=REGRESSIONS_SCHEMA))
                docs_out.write(_jsonl(whole, change_document))
        keys = [
            (layout.table_key(layout.REGRESSIONS, batch), parquet),
            (f"{DOCUMENTS}/part-{batch}.jsonl.zst", docs),
        ]
        for key, path in keys:
            warehouse.stage(batch, key, path)
    return [FileEntry(key=key, rows=len(rows)) for key, _ in keys]


def _jsonl(rows: list[dict[str, Any]], doc: Callable[[dict[str, Any]], dict[str, Any]]) -> bytes:
    return "".join(
        json.dumps(doc(r), sort_keys=True, separators=(",", ":")) + "\n" for r in rows
    ).encode()
