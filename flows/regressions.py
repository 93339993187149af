"""The regressions flow: detect changes after a committed ingest, record them, tell people.

Chained from the ingest flow (it runs when that ingest committed something) and deployable on
its own. The work is `kindex_etl.analysis.run.run_regressions`; this flow adds a markdown
artifact of the new alerts and one Prefect event (`kindex.regression.alert`) per new alert,
and `kindex.regression.retracted` per alert the analysis no longer finds.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.events import emit_event

from kindex_etl.analysis.alerts import event, markdown, retraction_events
from kindex_etl.analysis.run import Analysis, run_regressions
from kindex_etl.config import settings


@task(
    name="detect-regressions", retries=2, retry_delay_seconds=[5, 30], cache_policy=NONE,
    persist_result=False,
)  # fmt: skip
def detect(warehouse: str, since: str | None, after_seq: int | None = None) -> Analysis:
    # Safe to retry: a change already committed is not committed again. Never persisted,
    # whatever the deployment's default: the result is used in this process, and its run-id
    # lists live in a local temporary file (`kindex_etl.analysis.spill`).
    return run_regressions(warehouse, since=since, after_seq=after_seq)


@flow(name="kindex-regressions", log_prints=False)
def regressions_flow(
    warehouse: str | None = None, since: str | None = None, after_seq: int | None = None
) -> dict[str, Any]:
    """`after_seq`: only the series that ingests after that warehouse commit touched."""
    from prefect.artifacts import create_markdown_artifact

    result = detect(warehouse or settings().warehouse, since, after_seq)
    create_markdown_artifact(
        key="kindex-regressions",
        markdown=markdown(result),
        description="kindex-etl regressions: new alerts",
    )
    for change in result.new_alerts:
        emit_event(**event(change, result.warehouse))
    for retracted in retraction_events(result):
        emit_event(**retracted)
    get_run_logger().info(
        "%d changes, %d alerts, %d new, %d retracted",
        len(result.changes),
        len(result.alerts),
        len(result.new_alerts),
        len(result.retracted),
    )
    return result.as_dict()
