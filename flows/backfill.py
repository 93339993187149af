"""The backfill flow: re-ingest a chosen set of upstream objects, on demand.

Which objects: `kindex_etl/extract/select.py` (prefix, commit range, release tags, time). A
backfill re-reads selected objects even when the warehouse has their current version (rows
already there count as duplicates; nothing is written twice). It never triggers GPU re-runs
unless `trigger=True`. `dry_run=True` lists the objects (key, ETag, size) and changes nothing:
no warehouse folder is created, nothing is recovered, staged or committed.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows.artifacts import progress_key
from flows.common import IO_RETRY_DELAYS, run_ingest, transient
from kindex_etl.config import DEFAULT_OBJECTS_PER_BATCH, settings
from kindex_etl.extract.select import (
    Selection,
    commit_range,
    find_commit,
    parse_time,
    select,
)
from kindex_etl.ingestion.backfill import backfill_options, backfill_result
from kindex_etl.storage import open_store

__all__ = [
    "PROGRESS_KEY",
    "Selection",
    "backfill_flow",
    "commit_range",
    "find_commit",
    "parse_time",
]

PROGRESS_KEY = progress_key("backfill")


@task(name="read-commit-list", retries=3, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=transient, cache_policy=NONE)  # fmt: skip
def selection_task(upstream: str, filters: dict[str, Any]) -> tuple[Selection, list[str] | None]:
    return select(open_store(upstream), **filters)


@flow(name="kindex-backfill", log_prints=False)
def backfill_flow(
    upstream: str | None = None,
    warehouse: str | None = None,
    prefix: str = "",
    from_commit: str | None = None,
    to_commit: str | None = None,
    min_version: str | None = None,
    max_version: str | None = None,
    since: str | None = None,
    until: str | None = None,
    dry_run: bool = False,
    trigger: bool = False,
    objects_per_batch: int = DEFAULT_OBJECTS_PER_BATCH,
) -> dict[str, Any]:
    """Re-ingest the selected upstream objects (see kindex_etl/extract/select.py).

    Returns the summary with `objects` (key, etag, size, status, counts) and `selection`.
    """
    logger = get_run_logger()
    cfg = settings()
    upstream = upstream or cfg.upstream
    warehouse = warehouse or cfg.warehouse
    filters = {
        "prefix": prefix, "from_commit": from_commit, "to_commit": to_commit,
        "min_version": min_version, "max_version": max_version, "since": since, "until": until,
    }  # fmt: skip
    selection, entries = selection_task(upstream, filters)
    if entries:
        logger.info("commits %s .. %s: %d folder(s)", entries[0], entries[-1], len(entries))
    options = backfill_options(
        selection, dry_run=dry_run, trigger=trigger, objects_per_batch=objects_per_batch
    )
    summary = run_ingest(upstream, warehouse, options, label="backfill")
    return backfill_result(summary, selection, entries, dry_run=dry_run)
