"""The ingest flow: recover, plan, one task per commit batch, trigger, report.

Ingests of one warehouse queue rather than race: the work runs inside a Prefect global
concurrency limit named after the warehouse (`warehouse_limit_name`), created with limit 1 by
`deploy/setup.py`. Without that limit Prefect logs a warning and runs anyway; the warehouse's
conditional-write commit protocol keeps concurrent writers correct either way, the limit only
saves them from redoing each other's work.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.concurrency.sync import concurrency
from prefect.states import State

from kindex_etl.config import settings
from kindex_etl.pipeline import IngestOptions, IngestRun
from kindex_etl.reporting import publish_artifacts
from kindex_etl.summary import IngestSummary

WAREHOUSE_LIMIT_PREFIX = "kindex-warehouse-"
IO_RETRY_DELAYS: list[float] = [
    2,
    10,
    30,
]  # seconds, growing: storage hiccups clear, outages get time


def normalize_warehouse_url(url: str) -> str:
    """The URL the opened store reports (`ObjectStore.url`), without opening anything."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        prefix = parsed.path.strip("/")
        return f"s3://{parsed.netloc}/{prefix}" if prefix else f"s3://{parsed.netloc}"
    path = parsed.path if parsed.scheme == "file" else url
    return str(Path(path).resolve())


def warehouse_limit_name(url: str) -> str:
    """Name of the global concurrency limit that serializes writers of one warehouse."""
    digest = hashlib.sha256(normalize_warehouse_url(url).encode()).hexdigest()[:12]
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
def recover(run: IngestRun) -> dict[str, int]:
    return run.recover()


@task(
    name="plan-objects", retries=3, retry_delay_seconds=IO_RETRY_DELAYS,
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def plan(run: IngestRun) -> list[list[str]]:
    return run.plan()


@task(
    name="ingest-objects", retries=2, retry_delay_seconds=[5, 30],
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def ingest_objects(run: IngestRun, keys: list[str]) -> int:
    """One commit batch. Safe to retry: nothing is visible until its commit record exists."""
    run.ingest_chunk(keys)
    return len(keys)


@task(name="finish-and-trigger", cache_policy=NONE)
def finish(run: IngestRun) -> IngestSummary:
    # No retries: a re-run request is recorded once (conditional create); a retry could not
    # report what the first attempt triggered.
    return run.finish()


def run_ingest(
    run: IngestRun,
    *,
    label: str,
    on_planned: Callable[[list[list[str]]], None] | None = None,
    on_batch: Callable[[int, list[str]], None] | None = None,
) -> IngestSummary:
    """Recover, plan, ingest each commit batch, finish; publish artifacts. Returns the summary.

    Writing runs hold the warehouse's concurrency slot; a dry run reads only and takes none.
    """
    logger = get_run_logger()

    def work() -> IngestSummary:
        recover(run)
        chunks = plan(run)
        logger.info("%d object(s) to ingest in %d batch(es)", sum(map(len, chunks)), len(chunks))
        if on_planned is not None:
            on_planned(chunks)
        if not run.options.dry_run:
            for i, keys in enumerate(chunks, 1):
                ingest_objects.with_options(name=f"ingest-objects-{i}")(run, keys)
                if on_batch is not None:
                    on_batch(i, keys)
        return finish(run)

    if run.options.dry_run:
        summary = work()
    else:
        with warehouse_slot(run.warehouse.store.url):
            summary = work()
    publish_artifacts(summary, label=label)
    logger.info(
        "runs written %d, duplicates %d, quarantined %d, new versions %s",
        summary.runs_written, summary.duplicate_rows, summary.quarantined_rows,
        summary.new_versions,
    )  # fmt: skip
    return summary


@flow(name="kindex-ingest", log_prints=False)
def ingest_flow(
    upstream: str | None = None,
    warehouse: str | None = None,
    backfill: bool = False,
    trigger: bool = True,
    prefix: str = "",
) -> dict[str, Any]:
    """Ingest new upstream CSV objects into the warehouse (scheduled hourly in deploy/).

    `upstream` / `warehouse` default to KINDEX_UPSTREAM / KINDEX_WAREHOUSE of the process that
    runs the flow. A backfill (re-read every object) never triggers GPU re-runs here; the
    `backfill` flow can, when asked.
    """
    cfg = settings()
    options = IngestOptions(backfill=backfill, trigger=trigger and not backfill, prefix=prefix)
    run = IngestRun(upstream or cfg.upstream, warehouse or cfg.warehouse, options)
    return run_ingest(run, label="ingest").as_dict()
