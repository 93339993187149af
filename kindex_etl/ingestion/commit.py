"""The commit loop: process a batch, commit its record, publish, advance the snapshot.

Retries when another writer commits first: their work may cover ours, so the sources are
asked for again (what is still pending) and only that is redone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from kindex_etl.errors import PreconditionFailed, StorageError
from kindex_etl.ingestion import progress
from kindex_etl.ingestion.batch import Ingestor, Source
from kindex_etl.ingestion.results import ObjectReport
from kindex_etl.load.faults import fault_point

COMMIT_ATTEMPTS = 8


@dataclass(frozen=True)
class BatchOutcome:
    """What one commit batch did: its objects' reports, held-back reasons, and its commit."""

    reports: list[ObjectReport] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    commit: int | None = None  # None: nothing new to commit
    versions: list[str] = field(default_factory=list)  # liger_versions the commit holds


def commit_sources(
    ingestor: Ingestor,
    make_sources: Callable[[], list[Source]],
    *,
    salt: str = "",
    replayed_files: Callable[[], list[str]] | None = None,
    carry: pa.Table | None = None,
    unchanged_if: Counter[tuple[object, ...]] | None = None,
) -> BatchOutcome:
    """Process, stage and commit one batch, retrying when a concurrent writer commits first."""
    warehouse = ingestor.warehouse
    for _attempt in range(COMMIT_ATTEMPTS):
        sources = make_sources()
        if not sources:
            return BatchOutcome()
        replayed = replayed_files() if replayed_files else None
        staged = ingestor.process(
            sources, salt=salt, replayed_files=replayed, carry=carry, unchanged_if=unchanged_if
        )
        reasons = dict(Counter(staged.reasons))
        if staged.record is None:
            return BatchOutcome(staged.reports, reasons)
        # From the commit record to the snapshot, a stop waits: nothing is left half-visible.
        with progress.shielded():
            try:
                seq = warehouse.commit(staged.record)
            except PreconditionFailed:
                # Someone committed first: their work may cover ours. Re-read, redo what's left.
                warehouse.discard(staged.record.batch)
                warehouse.refresh()
                continue
            ingestor.committed()
            progress.commit_made(seq, staged.reports)
            fault_point("after_commit")
            warehouse.publish(staged.record)
            fault_point("after_publish")
            warehouse.update_snapshot()
        return BatchOutcome(staged.reports, reasons, seq, staged.record.versions)
    raise StorageError(f"gave up after {COMMIT_ATTEMPTS} commit conflicts on {warehouse.store.url}")
