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
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, cast

from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from prefect.concurrency.sync import concurrency
from prefect.context import FlowRunContext, SyncClientContext
from prefect.futures import PrefectFuture
from prefect.states import State
from prefect.utilities.annotations import quote

from flows.artifacts import ProgressArtifact, publish_artifacts
from kindex_etl import ingestion as stage
from kindex_etl.api import finish_and_trigger
from kindex_etl.catalog import Catalog, default_catalog
from kindex_etl.extract.discover import Candidate
from kindex_etl.ingestion import BatchOutcome, IngestOptions, IngestSummary, Plan, progress
from kindex_etl.ingestion.fanout import NormalizedObject, normalize_objects
from kindex_etl.ingestion.run import ingest_normalized_batch
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

    A deployment's run creates the limit when missing (`ensure_warehouse_limit`), so every
    warehouse a run names is serialized, not only those deploy/setup.py was told of. Without a
    configured API (the embedded default) no slot is taken at all.
    """
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        # The embedded default: a private, temporary API server per process, where no limit
        # exists and none could serialize anything. The commit protocol still guards writes.
        yield
        return
    name = warehouse_limit_name(url)
    run = FlowRunContext.get()
    if run is not None and run.flow_run is not None and run.flow_run.deployment_id is not None:
        # A deployment's run (a worker's process): serialized whatever warehouse it names.
        # Not the CLI's in-process runs: a stopped command (os._exit) would leave its slot
        # held, and the next command on that warehouse would wait for the lease to lapse.
        ensure_warehouse_limit(name)
    with concurrency(name, occupy=1, strict=False):
        yield


def ensure_warehouse_limit(name: str) -> None:
    """Create the warehouse's limit (1 slot) unless it exists.

    deploy/setup.py creates it for the warehouses it is told of; a run naming another one (a
    `warehouse` parameter) ran unserialized ("Concurrency limits ... do not exist", issue 32).
    Two runs creating it at once: one wins, the other's conflict is the same outcome.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with suppress(ObjectAlreadyExists):
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1, active=True)
                )


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


@task(
    name="normalize-objects", retries=2, retry_delay_seconds=[5, 30],
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def normalize_task(
    upstream: str, batch: list[Candidate], catalog: Catalog
) -> list[NormalizedObject]:
    """Read and normalize one commit batch, on a worker. Pure: a retry commits nothing."""
    return normalize_objects(upstream, batch, catalog)


@task(
    name="ingest-objects", retries=2, retry_delay_seconds=[5, 30],
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def commit_normalized(
    upstream: str,
    warehouse: str,
    options: IngestOptions,
    batch: list[Candidate],
    normalized: list[NormalizedObject],
) -> BatchOutcome:
    """Dedup, write, stage and commit a batch workers normalized; runs in the flow process."""
    return ingest_normalized_batch(upstream, warehouse, options, batch, normalized)


def fans_out() -> bool:
    """Whether this flow run's task runner is prefect-dask's (tasks go to Dask workers)."""
    context = FlowRunContext.get()
    if context is None:
        return False
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:  # the `dask` extra is not installed: nothing can be on Dask
        return False
    return isinstance(context.task_runner, DaskTaskRunner)


def _fanned_out(
    upstream: str, warehouse: str, options: IngestOptions, planned: Plan, ahead: int
) -> Iterator[BatchOutcome]:
    """Normalize batches on the task runner, `ahead` in flight; commit each here, in order.

    Only the normalizing is submitted: the commits are direct task calls, so they run in this
    process one at a time, in plan order, through the same conditional-write commit loop as a
    sequential ingest. Results are taken in order, so at most `ahead` + 1 batches of
    normalized rows are held at once, whatever the plan's length.
    """
    catalog = options.catalog or default_catalog()  # the workers use this one, not theirs
    todo = iter(enumerate(planned.batches, 1))
    flight: deque[tuple[int, list[Candidate], PrefectFuture[list[NormalizedObject]]]] = deque()

    def submit() -> None:
        for i, batch in todo:
            named = normalize_task.with_options(name=f"normalize-objects-{i}")
            flight.append((i, batch, named.submit(upstream, batch, catalog)))
            return

    for _ in range(ahead):
        submit()
    while flight:
        i, batch, future = flight.popleft()
        submit()
        normalized = future.result()
        committing = commit_normalized.with_options(name=f"ingest-objects-{i}")
        # quote: Prefect would otherwise walk every block and descriptor looking for futures.
        yield committing(upstream, warehouse, options, batch, cast(Any, quote(normalized)))


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
    fan_out: int = 0,
    allow_empty: bool = False,
) -> IngestSummary:
    """Recover, plan, ingest each commit batch, finish; publish artifacts. Returns the summary.

    No upstream CSV under the prefix fails the run (`EmptyUpstream`, never retried) before
    anything is written, unless `allow_empty`: a scheduled run with a mistyped prefix must not
    succeed on nothing, hour after hour (issue 54).

    `fan_out` > 0: the batches are read and normalized on the flow's task runner (Dask),
    that many ahead, and committed here in plan order (`_fanned_out`).

    Writing runs hold the warehouse's concurrency slot; a dry run reads only and takes none.
    Progress goes to `kindex_etl.ingestion.progress` (the terminal watches it) and to a progress
    artifact; each batch's task logs its counts.
    """
    logger = get_run_logger()
    started = time.perf_counter()
    if not allow_empty:
        stage.require_objects(upstream, options.prefix)

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
            if fan_out:
                done: Iterator[BatchOutcome] = _fanned_out(
                    upstream, warehouse, options, planned, fan_out
                )
            else:
                done = (
                    ingest_objects.with_options(name=f"ingest-objects-{i}")(
                        upstream, warehouse, options, batch
                    )
                    for i, batch in enumerate(planned.batches, 1)
                )
            for i, (batch, outcome) in enumerate(zip(planned.batches, done, strict=True), 1):
                outcomes.append(outcome)
                progress.batch_done(outcome, len(batch), sum(c.info.size for c in batch))
                current = progress.current()
                if current is not None:
                    logger.info("%s", current.describe())
                if on_batch is not None:
                    on_batch(i, planned)
        return finish(upstream, warehouse, options, planned, outcomes, started)

    # One API client for the run's tasks and artifacts, Prefect's own way to share one: each
    # would otherwise open its own (an SSL context loading the CA bundle and a version check,
    # ~30 ms apiece, eight a one-batch run; docs/performance.md, stop 28).
    with SyncClientContext.get_or_create():
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


def analysis_subflow(warehouse: str, after_seq: int | None = None) -> dict[str, Any]:
    """Run the regressions flow as a subflow: of an ingest that committed something, on the
    series that its commits (those after `after_seq`) touched; of the daily maintenance, on
    every series (`after_seq` None). Returns what the caller's summary says of it.

    The ingest's cached ingestor goes first: the analysis reads the whole warehouse, and in
    the same process its peak came on top of the ingestor's caches (docs/performance.md, "The
    regressions step, stop 22").
    """
    from flows.regressions import regressions_flow
    from kindex_etl.ingestion.run import forget_ingestor

    forget_ingestor()
    scope = "the chained analysis" if after_seq is not None else "every series"
    progress.stage(f"looking for regressions in the warehouse ({scope})")
    found = regressions_flow(warehouse=warehouse, after_seq=after_seq)
    keys = ("changes", "alerts", "new_alerts", "new_changes", "retracted", "commit", "report",
            "elapsed_s", "report_s", "seq", "workers", "announced", "incremental")  # fmt: skip
    return {k: found[k] for k in keys}


def owed_analysis_subflow(warehouse: str) -> dict[str, Any] | None:
    """The analysis an earlier run left owed (`kindex_etl.analysis.owed`), as
    `analysis_subflow` runs it; None when none is owed (a dry run's warehouse may not exist)."""
    from kindex_etl.analysis.owed import owed_analysis
    from kindex_etl.load.warehouse import existing_warehouse

    found = existing_warehouse(warehouse)
    owed = owed_analysis(found.store) if found is not None else None
    if owed is None:
        return None
    get_run_logger().info("%s: running it now", owed.describe())
    return analysis_subflow(warehouse, after_seq=owed.after_seq)
