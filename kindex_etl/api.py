"""The whole ingest as one call: the stages in order, then the GPU re-run trigger.

`flows/common.py` runs the same steps as Prefect tasks; this is the plain-Python composition
behind `kindex_etl.ingest`.
"""

from __future__ import annotations

import time

from kindex_etl.ingestion import (
    BatchOutcome,
    IngestOptions,
    IngestSummary,
    Plan,
    finish,
    ingest_batch,
    plan,
    recover,
)
from kindex_etl.load.warehouse import open_warehouse


def finish_and_trigger(
    upstream_url: str,
    warehouse_url: str,
    options: IngestOptions,
    planned: Plan,
    outcomes: list[BatchOutcome],
    *,
    started: float,
) -> IngestSummary:
    """The run's summary, after requesting GPU re-runs for releases new to the warehouse."""
    summary = finish(upstream_url, warehouse_url, options, planned, outcomes, started=started)
    if options.triggers and summary.new_versions:
        from kindex_etl.reruns import on_new_versions

        summary.reruns_triggered = on_new_versions(
            open_warehouse(warehouse_url),
            set(planned.versions_before),
            summary.new_versions,
            upstream=summary.upstream,
        )
        summary.elapsed_s = round(time.perf_counter() - started, 3)
    return summary


def ingest(
    upstream_url: str, warehouse_url: str, options: IngestOptions | None = None
) -> IngestSummary:
    """Ingest every new upstream CSV object into the warehouse; returns what happened."""
    options = options or IngestOptions()
    started = time.perf_counter()
    planned = plan(upstream_url, warehouse_url, options, recover(warehouse_url, options))
    outcomes = (
        []
        if options.dry_run
        else [ingest_batch(upstream_url, warehouse_url, options, b) for b in planned.batches]
    )
    return finish_and_trigger(
        upstream_url, warehouse_url, options, planned, outcomes, started=started
    )
