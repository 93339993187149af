"""Vacuum: delete the objects of files retired longer ago than the retention, then say so;
then Delta's own log upkeep (a checkpoint per table, expired log entries dropped).

Order matters for crashes: the objects are deleted first and the `vacuum` record that forgets
them is committed after. A crash in between leaves files that the state still lists as
retired and that are partly gone: nothing live is touched, and the next vacuum deletes what
is left (a missing object is not an error) and commits. Committing first could leak objects
that no record names any more.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kindex_etl.config import settings
from kindex_etl.errors import PreconditionFailed, StorageError
from kindex_etl.load import delta, layout
from kindex_etl.load.faults import fault_point
from kindex_etl.load.record import VACUUM, CommitRecord
from kindex_etl.load.state import RetiredFile
from kindex_etl.load.warehouse import open_warehouse

COMMIT_ATTEMPTS = 8


@dataclass
class VacuumResult:
    commit: int | None = None  # None: nothing old enough
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


def _parse(at: str) -> datetime:
    return datetime.fromisoformat(at.replace("Z", "+00:00"))


def expired(retired: dict[str, RetiredFile], retention: timedelta, now: datetime) -> list[str]:
    return [k for k, r in retired.items() if now - _parse(r.at) >= retention]


def vacuum(warehouse_url: str, *, retention: timedelta | None = None) -> VacuumResult:
    """Delete retired files older than `retention` (default KINDEX_VACUUM_RETENTION_S)."""
    keep_for = (
        retention if retention is not None else timedelta(seconds=settings().vacuum_retention_s)
    )
    warehouse = open_warehouse(warehouse_url)
    # Daily at the least: Delta tables a failed publish left behind catch up here.
    warehouse.refresh()
    warehouse.update_snapshot()
    for _attempt in range(COMMIT_ATTEMPTS):
        warehouse.refresh()
        retired = warehouse.state.retired
        keys = expired(retired, keep_for, datetime.now(UTC))
        result = VacuumResult(kept=len(retired) - len(keys))
        if not keys:
            result.delta_logs = delta.maintain_logs(warehouse.store)
            return result
        # A retired file may still be listed by a Delta table whose publish failed (a
        # transient error after the compaction's commit): publish first, delete only after.
        warehouse.update_snapshot()
        if delta.published_seq(warehouse.store) < warehouse.head:
            raise StorageError(
                f"{warehouse.store.url}: the Delta tables lag the log; not deleting files they "
                "may still list (run the vacuum again)"
            )
        for i, key in enumerate(keys):
            warehouse.store.delete(key)
            warehouse.store.delete(layout.staging_key(retired[key].batch, key))
            if i == 0:
                fault_point("vacuum_mid_delete")
        batch = hashlib.sha256("vacuum\n".join(keys).encode()).hexdigest()[:16]
        try:
            seq = warehouse.commit(CommitRecord(batch=batch, kind=VACUUM, vacuumed=keys))
        except PreconditionFailed:
            continue
        warehouse.update_snapshot()
        result.commit, result.deleted = seq, keys
        result.delta_logs = delta.maintain_logs(warehouse.store)
        return result
    raise StorageError(
        f"gave up vacuuming after {COMMIT_ATTEMPTS} commit conflicts on {warehouse.store.url}"
    )
