"""The maintenance flow: compaction, then vacuum, holding the warehouse's slot, then a full
analysis (deploy/: daily)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows.artifacts import _sync
from flows.common import IO_RETRY_DELAYS, transient, warehouse_slot
from kindex_etl import flow_runs
from kindex_etl.config import settings
from kindex_etl.maintenance import compact, vacuum


@task(
    name="compact-warehouse", retries=2, retry_delay_seconds=IO_RETRY_DELAYS,
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def compact_task(warehouse: str, target_rows: int | None) -> dict[str, Any]:
    # Safe to retry: a compaction is one commit, and planning again finds what is left.
    return compact(warehouse, target_rows=target_rows).as_dict()


@task(
    name="vacuum-warehouse", retries=2, retry_delay_seconds=IO_RETRY_DELAYS,
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def vacuum_task(warehouse: str, retention_s: float | None) -> dict[str, Any]:
    retention = None if retention_s is None else timedelta(seconds=retention_s)
    return vacuum(warehouse, retention=retention).as_dict()


@flow(name="kindex-maintenance", log_prints=False, on_running=[flow_runs.remember])
def maintenance_flow(
    warehouse: str | None = None,
    target_rows: int | None = None,
    vacuum_retired: bool = True,
    retention_s: float | None = None,
    analyse: bool = True,
) -> dict[str, Any]:
    """Compact small files into large ones, then delete files retired past the retention,
    then (`analyse`) run the regressions analysis over every series.

    Holds the warehouse's concurrency slot like an ingest, so the two queue instead of racing
    for the next commit (either would win correctly; the loser would redo its work). The
    hourly ingests analyse only the series they touched, which neither rewrites the report
    (a view of every series) nor retracts the changes of series that no longer exist (a
    reprocess, a catalog change): the daily full analysis does both. It runs after the slot
    is given back: an analysis commits through the log like any writer, and holding the slot
    for it would hold the next hourly ingest back for minutes on a large warehouse.
    """
    from prefect.artifacts import create_markdown_artifact

    from kindex_etl.cli.maintenance import compact_human, vacuum_human

    url = warehouse or settings().warehouse
    logger = get_run_logger()
    with warehouse_slot(url):
        out = {"compact": compact_task(url, target_rows)}
        # What it did, in the run's log and on its page (it said nothing; issue 32).
        lines = [compact_human(out["compact"])]
        logger.info("%s", lines[-1])
        if vacuum_retired:
            out["vacuum"] = vacuum_task(url, retention_s)
            lines.append(vacuum_human(out["vacuum"]))
            logger.info("%s", lines[-1])
    if analyse:
        from flows.common import analysis_subflow
        from kindex_etl.cli.findings import analysis_human

        out["analysis"] = analysis_subflow(url)
        lines.append(f"full analysis: {analysis_human(out['analysis'])}")
        logger.info("%s", lines[-1])
    _sync(
        create_markdown_artifact,
        key="kindex-maintenance",
        markdown=f"# kindex-etl maintenance\n\n- warehouse: `{url}`\n"
        + "".join(f"- {line.replace(chr(10), ' ')}\n" for line in lines),
        description="kindex-etl maintenance: what compaction, vacuum and the analysis did",
    )
    return out
