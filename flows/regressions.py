"""The regressions flow: detect changes after a committed ingest, record them, tell people.

Chained from the ingest flow (it runs when that ingest committed something) and deployable on
its own. The work is `kindex_etl.analysis.run.run_regressions`; this flow adds a markdown
artifact of the new alerts, then announces: one Prefect event (`kindex.regression.alert`) per
alert and `kindex.regression.retracted` per retracted alert, for every commit since the last
announcement (`kindex_etl.analysis.announce`), so a retry or a crash after the commit loses
none and repeats none. The mark moves once Prefect's server has stored every event
(`kindex_etl.analysis.delivered`): a send the events worker dropped fails the task instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.events import emit_event
from prefect.events.utilities import should_emit_events

from kindex_etl import flow_runs
from kindex_etl.analysis.alerts import markdown
from kindex_etl.analysis.announce import (
    announced_through,
    pending,
    record_announced,
    start_announcing,
)
from kindex_etl.analysis.delivered import not_stored, unconfirmed, window_start
from kindex_etl.analysis.run import Analysis, run_regressions
from kindex_etl.config import settings
from kindex_etl.storage import open_store


class AnnouncementNotStored(RuntimeError):
    """Some events of an announcement were sent but never stored: the task fails (and retries)."""


@task(
    name="detect-regressions", retries=2, retry_delay_seconds=[5, 30], cache_policy=NONE,
    persist_result=False,
)  # fmt: skip
def detect(warehouse: str, since: str | None, after_seq: int | None = None) -> Analysis:
    # Safe to retry: a change already committed is not committed again. Never persisted,
    # whatever the deployment's default: the result is used in this process, and its run-id
    # lists live in a local temporary file (`kindex_etl.analysis.spill`).
    return run_regressions(warehouse, since=since, after_seq=after_seq)


@task(name="announce-alerts", retries=3, retry_delay_seconds=[2, 10, 30], cache_policy=NONE)
def announce(warehouse: str) -> int:
    """Emit every announcement since the mark; move the mark once Prefect's server has stored
    them all (`kindex_etl.analysis.delivered`), else fail and leave it.

    Safe to retry: what is emitted again has the same event ids."""
    from prefect.events.worker import EventsWorker

    store = open_store(warehouse)
    todo = pending(store)
    wait_s = settings().announce_confirm_s
    since = window_start(todo.events, datetime.now(UTC))
    # What an earlier attempt got stored is not sent again (automations could fire twice).
    check = wait_s > 0 and should_emit_events()
    to_send = not_stored(todo.events, since) if check else todo.events
    sent = [emit_event(**e) for e in to_send]
    if any(e is not None for e in sent):  # None: this process sends no events at all
        EventsWorker.instance().wait_until_empty()
    lost = unconfirmed(to_send, wait_s, since) if check else []
    if lost:
        raise AnnouncementNotStored(
            f"Prefect's server has not stored {len(lost)} of {len(todo.events)} "
            f"announcement(s) after {wait_s:g} s (first: {lost[0]['event']} "
            f"{lost[0]['id']}); the mark stays at commit {announced_through(store)}"
        )
    record_announced(store, todo.through)
    return len(todo.events)


@flow(name="kindex-regressions", log_prints=False, on_running=[flow_runs.remember])
def regressions_flow(
    warehouse: str | None = None, since: str | None = None, after_seq: int | None = None
) -> dict[str, Any]:
    """`after_seq`: only the series that ingests after that warehouse commit touched."""
    from prefect.artifacts import create_markdown_artifact

    url = warehouse or settings().warehouse
    start_announcing(open_store(url, create=True))
    result = detect(url, since, after_seq)
    create_markdown_artifact(
        key="kindex-regressions",
        markdown=markdown(result),
        description="kindex-etl regressions: new alerts",
    )
    told = announce(result.warehouse)
    get_run_logger().info(
        "%d changes, %d alerts, %d new, %d retracted; %d event(s) announced",
        len(result.changes),
        len(result.alerts),
        len(result.new_alerts),
        len(result.retracted),
        told,
    )
    # Counts, not the change rows: Prefect walks a flow's return value looking for futures
    # and states, and over a full analysis's 16,889 changes that walk took 4.6 s.
    return result.as_dict() | {"changes": len(result.changes), "announced": told}
