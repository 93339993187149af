"""The ingest flow: recover, plan, one task per commit batch, trigger, report."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from kindex_etl.pipeline import IngestOptions, IngestRun, IngestSummary
from kindex_etl.reporting import publish_artifacts


@task(name="recover-warehouse", retries=3, retry_delay_seconds=[2, 10, 30], cache_policy=NONE)
def recover(run: IngestRun) -> dict[str, int]:
    return run.recover()


@task(name="plan-objects", retries=3, retry_delay_seconds=[2, 10, 30], cache_policy=NONE)
def plan(run: IngestRun) -> list[list[str]]:
    return run.plan()


@task(name="ingest-objects", retries=2, retry_delay_seconds=[5, 30], cache_policy=NONE)
def ingest_objects(run: IngestRun, keys: list[str]) -> int:
    """One commit batch. Safe to retry: nothing is visible until its commit record exists."""
    run.ingest_chunk(keys)
    return len(keys)


@task(name="finish-and-trigger", cache_policy=NONE)
def finish(run: IngestRun) -> IngestSummary:
    return run.finish()


def run_ingest(run: IngestRun, *, label: str) -> dict[str, Any]:
    logger = get_run_logger()
    recover(run)
    chunks = plan(run)
    logger.info("%d object(s) to ingest in %d batch(es)", sum(map(len, chunks)), len(chunks))
    if not run.options.dry_run:
        for i, keys in enumerate(chunks, 1):
            ingest_objects.with_options(name=f"ingest-objects-{i}")(run, keys)
    summary = finish(run)
    publish_artifacts(summary, label=label)
    logger.info(
        "runs written %d, duplicates %d, quarantined %d, new versions %s",
        summary.runs_written, summary.duplicate_rows, summary.quarantined_rows,
        summary.new_versions,
    )  # fmt: skip
    return summary.as_dict()


@flow(name="kindex-ingest", log_prints=False)
def ingest_flow(
    upstream: str,
    warehouse: str,
    backfill: bool = False,
    trigger: bool = True,
    prefix: str = "",
) -> dict[str, Any]:
    """Ingest new upstream CSV objects into the warehouse (scheduled hourly in deploy/)."""
    options = IngestOptions(backfill=backfill, trigger=trigger, prefix=prefix)
    return run_ingest(IngestRun(upstream, warehouse, options), label="ingest")
