"""A backfill's options and result: what the backfill flow and a dry run without it share."""

from __future__ import annotations

from typing import Any

from kindex_etl.config import DEFAULT_OBJECTS_PER_BATCH
from kindex_etl.extract.select import Selection
from kindex_etl.ingestion.results import IngestSummary
from kindex_etl.ingestion.run import IngestOptions


def backfill_options(
    selection: Selection,
    *,
    dry_run: bool = False,
    trigger: bool = False,
    objects_per_batch: int = DEFAULT_OBJECTS_PER_BATCH,
) -> IngestOptions:
    """Re-read every selected object (rows already there count as duplicates)."""
    return IngestOptions(
        backfill=True,
        trigger=trigger,
        prefix=selection.list_prefix,
        include=selection,
        dry_run=dry_run,
        max_objects_per_commit=max(1, objects_per_batch),
    )


def backfill_result(
    summary: IngestSummary, selection: Selection, entries: list[str] | None, *, dry_run: bool
) -> dict[str, Any]:
    """The summary with every object listed, and the selection it was made from."""
    out = summary.as_dict(objects=True)
    out["selection"] = selection.describe(entries)
    out["dry_run"] = dry_run
    return out
