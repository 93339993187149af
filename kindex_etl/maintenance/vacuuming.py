"""Vacuum: delta-rs deletes what no Delta table needs any more, one kindex record forgets it.

delta-rs deletes each table's files removed longer ago than the retention, and (its full vacuum)
files no version lists that are older than the orphan grace as well: a compaction's that was
never recorded, a killed writer's, never a committed one not yet published. Retired JSON
documents (no Delta table) are deleted here. A `vacuum` record then forgets what is gone, settled
quarantine files included; a crash before it touches nothing live. Then Delta's log upkeep.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kindex_etl.config import settings
from kindex_etl.errors import PreconditionFailed, StorageError
from kindex_etl.load import delta, layout
from kindex_etl.load.faults import fault_point
from kindex_etl.load.record import VACUUM, CommitRecord
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.maintenance.compaction import recorded_difference

COMMIT_ATTEMPTS = 8


@dataclass
class VacuumResult:
    commit: int | None = None  # None: nothing the log names was deleted
    deleted: list[str] = field(default_factory=list)
    kept: int = 0  # retired files still inside the retention period
    # Each Delta table checkpointed at this version, its expired log entries dropped.
    delta_logs: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "commit": self.commit,
            "deleted": len(self.deleted),
            "kept": self.kept,
            "delta_tables": len(self.delta_logs),
        }


def _expired(warehouse: Warehouse, retention: timedelta) -> list[str]:
    now = datetime.now(UTC)
    return [
        k
        for k, r in warehouse.state.retired.items()
        if now - datetime.fromisoformat(r.at.replace("Z", "+00:00")) >= retention
    ]


def vacuum_tables(warehouse: Warehouse, retention: timedelta, grace: timedelta) -> list[str]:
    """delta-rs's vacuum of every Delta table, its full one (files no version lists) only past
    `grace` as well: a writer's committed files are in no Delta log until it publishes them.

    `document_files` too: each publish replaces its one file with a new one (and a publisher
    writes that file before its commit lists it, hence the grace here too), so its superseded
    files go with the same retention as every other table's retired ones. (Left to delta-rs's
    default week, whatever the retention, 35 hourly commits left 37 files where every other
    table had one per partition.)"""
    options = delta.storage_options(warehouse.store)
    deleted: list[str] = []
    for i, table in enumerate((*delta.PUBLISH_ORDER, delta.DOCUMENT_FILES)):
        dt = delta.open_table(warehouse.store, table, options)
        if dt is None:
            continue
        for full, keep in ((False, retention), (True, max(retention, grace))):
            paths = dt.vacuum(
                retention_hours=math.ceil(keep.total_seconds() / 3600),  # whole hours, up
                enforce_retention_duration=False,
                dry_run=False,
                full=full,
            )
            deleted += [delta.warehouse_key(table, p) for p in paths]
        if i == 0:
            fault_point("vacuum_mid_delete")
    return deleted


def vacuum(warehouse_url: str, *, retention: timedelta | None = None) -> VacuumResult:
    """Delete retired files older than `retention` (default KINDEX_VACUUM_RETENTION_S)."""
    keep_for = (
        retention if retention is not None else timedelta(seconds=settings().vacuum_retention_s)
    )
    warehouse = open_warehouse(warehouse_url)
    # Daily at the least: Delta tables a failed publish left behind catch up here.
    warehouse.refresh()
    warehouse.update_snapshot()
    # Files the log names that a table does not (a compaction of delta-rs's not recorded yet)
    # would be deleted as removed ones: every table must list what the log's head does.
    if recorded_difference(warehouse) != ([], []):
        raise StorageError(
            f"{warehouse.store.url}: a Delta table does not list what the log's head does (a "
            "publish behind, a compaction not recorded); not vacuuming: run `kindex-etl "
            "compact`, then the vacuum again"
        )
    deleted = vacuum_tables(warehouse, keep_for, timedelta(seconds=settings().orphan_grace_s))
    for key in _expired(warehouse, keep_for):
        if key.startswith("documents/"):
            warehouse.store.delete(key)
            deleted.append(key)
    for _attempt in range(COMMIT_ATTEMPTS):
        warehouse.refresh()
        state = warehouse.state
        # Whatever this vacuum or an earlier one that crashed deleted, by the log's own view.
        retired = [k for k in _expired(warehouse, keep_for) if not warehouse.store.head(k)]
        settled = state.replayed & set(state.files(layout.QUARANTINE))
        settled = {k for k in settled if not warehouse.store.head(k)}
        result = VacuumResult(deleted=sorted(deleted), kept=len(state.retired) - len(retired))
        if not retired and not settled:
            result.delta_logs = delta.maintain_logs(warehouse.store)
            return result
        gone = retired + sorted(settled)
        batch = hashlib.sha256("vacuum\n".join(gone).encode()).hexdigest()[:16]
        try:
            seq = warehouse.commit(
                CommitRecord(batch=batch, kind=VACUUM, retires=sorted(settled), vacuumed=gone)
            )
        except PreconditionFailed:
            continue
        warehouse.update_snapshot()
        result.commit, result.deleted = seq, sorted(set(deleted) | set(gone))
        result.delta_logs = delta.maintain_logs(warehouse.store)
        return result
    raise StorageError(
        f"gave up vacuuming after {COMMIT_ATTEMPTS} commit conflicts on {warehouse.store.url}"
    )
