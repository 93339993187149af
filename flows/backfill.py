"""The backfill flow: re-ingest a chosen set of upstream objects, on demand.

Which objects: `kindex_etl/extract/select.py` (prefix, commit range, release tags, time). A
backfill re-reads selected objects even when the warehouse has their current version (rows
already there count as duplicates; nothing is written twice). It never triggers GPU re-runs
unless `trigger=True`. `dry_run=True` lists the objects (key, ETag, size) and changes nothing:
no warehouse folder is created, nothing is recovered, staged or committed.

Past one machine: run it on prefect-dask's `DaskTaskRunner` (`dask_task_runner`, chosen by
`KINDEX_DASK_ADDRESS` / `KINDEX_DASK_WORKERS`) and each commit batch's objects are read and
normalized on Dask workers, `KINDEX_DASK_AHEAD` batches ahead, while this process dedups,
writes and commits them one at a time in plan order (see `kindex_etl/ingestion/fanout.py`).
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.task_runners import TaskRunner

from flows.artifacts import progress_key
from flows.common import IO_RETRY_DELAYS, fans_out, owed_analysis_subflow, run_ingest, transient
from kindex_etl import flow_runs
from kindex_etl.config import DEFAULT_OBJECTS_PER_BATCH, Settings, settings
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
    "dask_task_runner",
    "find_commit",
    "parse_time",
]

PROGRESS_KEY = progress_key("backfill")


@task(name="read-commit-list", retries=3, retry_delay_seconds=IO_RETRY_DELAYS,
      retry_condition_fn=transient, cache_policy=NONE)  # fmt: skip
def selection_task(upstream: str, filters: dict[str, Any]) -> tuple[Selection, list[str] | None]:
    return select(open_store(upstream), **filters)


@flow(name="kindex-backfill", log_prints=False, on_running=[flow_runs.remember])
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
    allow_empty: bool = False,
    regressions: bool = True,
) -> dict[str, Any]:
    """Re-ingest the selected upstream objects (see kindex_etl/extract/select.py).

    Then the analysis its commits (and any earlier run's) are owed, as an ingest chains it
    (`regressions=False` leaves it owed: the next ingest, backfill or analysis runs it).

    No upstream CSV under `prefix` fails the run, unless `allow_empty` (filters that select
    nothing among existing CSVs do not: that is an answer, not a typo).

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
    ahead = cfg.dask_ahead if fans_out() else 0
    if ahead:
        logger.info("reading and normalizing on Dask, %d batch(es) ahead", ahead)
    summary = run_ingest(
        upstream, warehouse, options, label="backfill", fan_out=ahead, allow_empty=allow_empty
    )
    result = backfill_result(summary, selection, entries, dry_run=dry_run)
    result["analysis"] = None
    if regressions and not dry_run:
        result["analysis"] = owed_analysis_subflow(warehouse)
    return result


def dask_task_runner(cfg: Settings | None = None) -> TaskRunner[Any] | None:
    """The Dask task runner the settings ask for, or None (the default: no Dask)."""
    cfg = cfg or settings()
    if not cfg.dask_address and not cfg.dask_workers:
        return None
    from prefect_dask import DaskTaskRunner

    if cfg.dask_address:
        return DaskTaskRunner(address=cfg.dask_address)
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": cfg.dask_workers,
            "threads_per_worker": 1,  # normalizing holds the GIL part of the time
            "processes": True,
            "host": "127.0.0.1",
            "dashboard_address": "127.0.0.1:0",  # None still binds :8787; ":0" all interfaces
        }
    )
