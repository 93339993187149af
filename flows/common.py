"""What the ingest and backfill flows share: the ingest's tasks and the warehouse's slot.

Each task wraps one plain function of `kindex_etl.ingestion` and passes plain values on (a plan,
batch outcomes), never a shared mutable object.

Ingests of one warehouse queue rather than race: the work runs inside a Prefect global
concurrency limit named after the warehouse (`warehouse_limit_name`), created with limit 1 by
`deploy/setup.py`. Without that limit Prefect logs a warning and runs anyway; the warehouse's
conditional-write commit protocol keeps concurrent writers correct either way, the limit only
saves them from redoing each other's work.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from prefect.concurrency.sync import concurrency
from prefect.states import State

from flows.artifacts import ProgressArtifact, publish_artifacts
from kindex_etl import ingestion as stage
from kindex_etl.api import finish_and_trigger
from kindex_etl.extract.discover import Candidate
from kindex_etl.ingestion import BatchOutcome, IngestOptions, IngestSummary, Plan, progress
from kindex_etl.storage import store_url

WAREHOUSE_LIMIT_PREFIX = "kindex-warehouse-"
# Seconds, growing: storage hiccups clear, outages get time.
IO_RETRY_DELAYS: list[float] = [2, 10, 30]


def normalize_warehouse_url(url: str) -> str:
    """The URL the opened store reports (`ObjectStore.url`), without opening anything."""
    return store_url(url)


def warehouse_limit_name(url: str) -> str:
    """Name of the global concurrency limit that serializes writers of one warehouse."""
    digest = hashlib.sha256(store_url(url).encode()).hexdigest()[:12]
    return f"{WAREHOUSE_LIMIT_PREFIX}{digest}"


@contextmanager
def warehouse_slot(url: str) -> Iterator[None]:
    """Hold the warehouse's one slot; waits while another run holds it.

    strict=False: when the limit was never created, Prefect logs "Concurrency limits [...] do
    not exist - skipping acquisition." and the run goes ahead unserialized (still correct).
    Without a configured API (the embedded default) no slot is taken at all.
    """
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        # The embedded default: a private, temporary API server per process, where no limit
        # exists and none could serialize anything. The commit protocol still guards writes.
        yield
        return
    with concurrency(warehouse_limit_name(url), occupy=1, strict=False):
        yield


def transient(task: Any, task_run: Any, state: State[Any]) -> bool:
    """Retry storage trouble, not mistakes: a ValueError (bad key, URL, argument) fails at once."""
    return not isinstance(state.data, ValueError)


@task(
    name="recover-warehouse", retries=3, retry_delay_seconds=IO_RETRY_DELAYS,
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def recover(warehouse: str, options: IngestOptions) -> dict[str, int]:
    return stage.recover(warehouse, options)


@task(
    name="plan-objects", retries=3, retry_delay_seconds=IO_RETRY_DELAYS,
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def plan(upstream: str, warehouse: str, options: IngestOptions, recovered: dict[str, int]) -> Plan:
    return stage.plan(upstream, warehouse, options, recovered)


@task(
    name="ingest-objects", retries=2, retry_delay_seconds=[5, 30],
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def ingest_objects(
    upstream: str, warehouse: str, options: IngestOptions, batch: list[Candidate]
) -> BatchOutcome:
    """One commit batch. Safe to retry: nothing is visible until its commit record exists."""
    return stage.ingest_batch(upstream, warehouse, options, batch)


@task(name="finish-and-trigger", cache_policy=NONE)
def finish(
    upstream: str,
    warehouse: str,
    options: IngestOptions,
    planned: Plan,
    outcomes: list[BatchOutcome],
    started: float,
) -> IngestSummary:
    # No retries: a re-run request is recorded once (conditional create); a retry could not
    # report what the first attempt triggered.
    return finish_and_trigger(upstream, warehouse, options, planned, outcomes, started=started)


def run_ingest(
    upstream: str,
    warehouse: str,
    options: IngestOptions,
    *,
    label: str,
    on_planned: Callable[[Plan], None] | None = None,
    on_batch: Callable[[int, Plan], None] | None = None,
) -> IngestSummary:
    """Recover, plan, ingest each commit batch, finish; publish artifacts. Returns the summary.

    Writing runs hold the warehouse's concurrency slot; a dry run reads only and takes none.
    Progress goes to `kindex_etl.ingestion.progress` (the terminal watches it) and to a progress
    artifact; each batch's task logs its counts.
    """
    logger = get_run_logger()
    started = time.perf_counter()

    def work() -> IngestSummary:
        planned = plan(upstream, warehouse, options, recover(warehouse, options))
        logger.info(
            "%d object(s) to ingest in %d batch(es)",
            sum(map(len, planned.batches)), len(planned.batches),
        )  # fmt: skip
        if on_planned is not None:
            on_planned(planned)
        outcomes: list[BatchOutcome] = []
        if not options.dry_run:
            progress.planned(planned)
            for i, batch in enumerate(planned.batches, 1):
                named = ingest_objects.with_options(name=f"ingest-objects-{i}")
                outcomes.append(named(upstream, warehouse, options, batch))
                progress.batch_done(outcomes[-1], len(batch), sum(c.info.size for c in batch))
                current = progress.current()
                if current is not None:
                    logger.info("%s", current.describe())
                if on_batch is not None:
                    on_batch(i, planned)
        return finish(upstream, warehouse, options, planned, outcomes, started)

    if options.dry_run:
        summary = work()
    else:
        with warehouse_slot(warehouse), progress.watching(ProgressArtifact(label)):
            summary = work()
    publish_artifacts(summary, label=label)
    logger.info(
        "runs written %d, duplicates %d, quarantined %d, new versions %s",
        summary.runs_written, summary.duplicate_rows, summary.quarantined_rows,
        summary.new_versions,
    )  # fmt: skip
    return summary


def regressions_after_ingest(warehouse: str) -> None:
    """Run the regressions flow as a subflow of an ingest that committed something."""
    from flows.regressions import regressions_flow

    regressions_flow(warehouse=warehouse)
