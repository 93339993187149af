"""The ingest as plain steps: recover, plan, ingest each batch, finish.

Each step takes and returns plain values, so a flow can make each one a task (and retry it)
without sharing a mutable object between tasks. What a process keeps between batches of one
warehouse (descriptor caches, the run index) is a resource, `ingestor_for`, re-synced with the
warehouse's log on every use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from typing import Any

from kindex_etl.catalog import Catalog, default_catalog
from kindex_etl.config import settings
from kindex_etl.contracts.versions import sort_versions
from kindex_etl.errors import EmptyUpstream
from kindex_etl.extract.discover import Candidate, any_csv, discover, pending
from kindex_etl.extract.read import count_lines, read_batches
from kindex_etl.ingestion.batch import Ingestor, Source
from kindex_etl.ingestion.commit import BatchOutcome, commit_sources
from kindex_etl.ingestion.fanout import NormalizedObject
from kindex_etl.ingestion.results import IngestSummary, ObjectReport
from kindex_etl.load.warehouse import Warehouse, existing_warehouse, open_warehouse
from kindex_etl.storage import ObjectStore, open_store, store_url

MAX_OBJECTS_PER_COMMIT = 256
MAX_BYTES_PER_COMMIT = 8 << 30
ALREADY_THERE = "already in the warehouse at this ETag: rows would be duplicates"


def _default_orphan_grace() -> timedelta:
    return timedelta(seconds=settings().orphan_grace_s)


@dataclass(frozen=True)
class IngestOptions:
    backfill: bool = False
    # Request GPU re-runs for new versions; None means "unless this is a backfill".
    trigger: bool | None = None
    prefix: str = ""
    include: Callable[[Any], bool] | None = None
    max_objects_per_commit: int = MAX_OBJECTS_PER_COMMIT
    catalog: Catalog | None = None
    orphan_grace: timedelta = field(default_factory=_default_orphan_grace)
    dry_run: bool = False

    @property
    def triggers(self) -> bool:
        return (not self.backfill if self.trigger is None else self.trigger) and not self.dry_run


@dataclass(frozen=True)
class Plan:
    """The objects to ingest, in commit batches, and what the warehouse held before."""

    batches: list[list[Candidate]]
    objects_seen: int
    versions_before: frozenset[str]
    recovered: dict[str, int] = field(default_factory=dict)


_ingestor: tuple[str, Catalog, Ingestor] | None = None


def ingestor_for(warehouse_url: str, catalog: Catalog | None = None) -> Ingestor:
    """The process's ingestor for one warehouse (its caches survive between batches)."""
    global _ingestor
    catalog = catalog or default_catalog()
    warehouse = open_warehouse(warehouse_url)
    if _ingestor is None or _ingestor[0] != warehouse.store.url or _ingestor[1] is not catalog:
        _ingestor = (warehouse.store.url, catalog, Ingestor(warehouse, catalog))
    ingestor = _ingestor[2]
    ingestor.warehouse.refresh()
    return ingestor


def forget_ingestor() -> None:
    """Drop the process's ingestor, its descriptor caches and run index with it (120 MiB after
    1M rows), for work that needs the memory more than a next ingest needs the caches: the
    analysis the ingest flow chains. A next ingest starts a new one (the run index from the
    newest checkpoint)."""
    global _ingestor
    _ingestor = None


def recover(warehouse_url: str, options: IngestOptions) -> dict[str, int]:
    """Finish interrupted publishes and remove orphaned staging (nothing on a dry run)."""
    if options.dry_run:
        return {}
    return open_warehouse(warehouse_url).recover(options.orphan_grace)


def _batches(candidates: list[Candidate], max_objects: int) -> Iterator[list[Candidate]]:
    chunk: list[Candidate] = []
    size = 0
    for c in candidates:
        if chunk and (len(chunk) >= max_objects or size + c.info.size > MAX_BYTES_PER_COMMIT):
            yield chunk
            chunk, size = [], 0
        chunk.append(c)
        size += c.info.size
    if chunk:
        yield chunk


def plan(
    upstream_url: str,
    warehouse_url: str,
    options: IngestOptions,
    recovered: dict[str, int] | None = None,
) -> Plan:
    """The objects to ingest (all selected ones on a backfill, else the new versions)."""
    upstream = open_store(upstream_url)
    # A dry run creates nothing: a warehouse that does not exist yet is an empty one.
    warehouse = (
        existing_warehouse(warehouse_url) if options.dry_run else open_warehouse(warehouse_url)
    )
    if warehouse is not None:
        warehouse.refresh()
    done = warehouse.done_objects() if warehouse is not None else {}
    candidates = discover(upstream, prefix=options.prefix, include=options.include)
    todo = candidates if options.backfill else pending(candidates, done)
    return Plan(
        batches=list(_batches(todo, max(1, options.max_objects_per_commit))),
        objects_seen=len(candidates),
        versions_before=frozenset(warehouse.versions() if warehouse is not None else ()),
        recovered=dict(recovered or {}),
    )


def require_objects(upstream_url: str, prefix: str = "") -> None:
    """Raise EmptyUpstream unless some upstream CSV lies under `prefix`; creates nothing.

    An ingest of nothing used to succeed ("objects: 0 seen"): `--prefix benchmarsk/` in a cron
    job never failed, and an empty folder became an empty warehouse (issue 54). The CLI and the
    flows call this before anything is written; `allow_empty` callers skip it.
    """
    upstream = open_store(upstream_url)
    if not any_csv(upstream, prefix):
        where = upstream.url + (f" (prefix {prefix!r})" if prefix else "")
        raise EmptyUpstream(
            f"upstream: no CSV under {where}; nothing was done (a typo? --allow-empty "
            "accepts an empty upstream)"
        )


def idle_summary(
    upstream_url: str, warehouse_url: str, options: IngestOptions
) -> IngestSummary | None:
    """The summary of an ingest with nothing to do, found by reading only; None if there is work.

    Nothing to do: no object selected (a backfill) or new (an ingest), and nothing for `recover`
    to finish. Such a run would commit nothing and trigger nothing, so a command can answer it
    without starting an orchestrator. A dry run is always answered here: it only lists.
    """
    started = time.perf_counter()
    planned = plan(upstream_url, warehouse_url, replace(options, dry_run=True))
    if not options.dry_run:
        if planned.batches:
            return None  # work: the flow recovers and plans again under its own tasks
        found = existing_warehouse(warehouse_url)
        if found is not None and not found.settled():
            return None
    return finish(upstream_url, warehouse_url, options, planned, [], started=started)


def _source(store: ObjectStore, c: Candidate) -> Source:
    return Source(
        key=c.key,
        etag=c.info.etag,
        software=c.software,
        size=c.info.size,
        batches=lambda: read_batches(store, c.key),
        count_lines=lambda: count_lines(store, c.key),
    )


def ingest_batch(
    upstream_url: str, warehouse_url: str, options: IngestOptions, batch: list[Candidate]
) -> BatchOutcome:
    """Ingest one commit batch. Safe to retry: nothing is visible until its record exists."""
    upstream = open_store(upstream_url)
    ingestor = ingestor_for(warehouse_url, options.catalog)
    return commit_sources(
        ingestor, partial(_still_pending, ingestor, options, batch, partial(_source, upstream))
    )


def _still_pending(
    ingestor: Ingestor,
    options: IngestOptions,
    batch: list[Candidate],
    source: Callable[[Candidate], Source],
) -> list[Source]:
    """The batch's sources still to do: all on a backfill, else those not done at this ETag
    (another writer may have committed some since the plan)."""
    if options.backfill:
        return [source(c) for c in batch]
    done = ingestor.warehouse.done_objects()
    return [source(c) for c in batch if done.get(c.key) != c.info.etag]


def ingest_normalized_batch(
    upstream_url: str,
    warehouse_url: str,
    options: IngestOptions,
    batch: list[Candidate],
    normalized: list[NormalizedObject],
) -> BatchOutcome:
    """Commit one batch that workers read and normalized (`fanout.normalize_objects`).

    The same dedup, writes and commit loop as `ingest_batch`, so the warehouse comes out the
    same. A commit conflict redoes only the classification here: normalizing does not depend
    on the warehouse, so the workers' output stays valid whoever committed first.
    """
    ingestor = ingestor_for(warehouse_url, options.catalog)
    made = {(n.key, n.etag): n for n in normalized}
    missing = [c.key for c in batch if (c.key, c.info.etag) not in made]
    if missing:
        raise ValueError(f"normalized objects do not match the batch: {missing[:3]}")
    upstream = open_store(upstream_url)

    def source(c: Candidate) -> Source:
        obj = made[(c.key, c.info.etag)]
        return Source(
            key=c.key,
            etag=c.info.etag,
            software=c.software,
            size=c.info.size,
            batches=lambda: read_batches(upstream, c.key),
            count_lines=lambda: obj.lines,
            normalized=obj,
        )

    return commit_sources(ingestor, partial(_still_pending, ingestor, options, batch, source))


def finish(
    upstream_url: str,
    warehouse_url: str,
    options: IngestOptions,
    planned: Plan,
    outcomes: list[BatchOutcome],
    *,
    started: float,
) -> IngestSummary:
    """The run's summary: every batch's counts, and the releases new to the warehouse."""
    summary = IngestSummary(
        upstream=open_store(upstream_url).url, warehouse=store_url(warehouse_url)
    )
    summary.objects_seen = planned.objects_seen
    summary.recovered = dict(planned.recovered)
    for outcome in outcomes:
        summary.add(outcome.reports, outcome.reasons)
        if outcome.commit is not None:
            summary.commits.append(outcome.commit)
    if options.dry_run:
        found = existing_warehouse(warehouse_url)
        done = found.done_objects() if found is not None else {}
        summary.objects = [
            ObjectReport(
                key=c.key,
                etag=c.info.etag,
                size=c.info.size,
                status="would-ingest",
                detail=ALREADY_THERE if done.get(c.key) == c.info.etag else "",
            )
            for batch in planned.batches
            for c in batch
        ]
        summary.objects_skipped = summary.objects_seen - len(summary.objects)
    else:
        # Objects another writer finished while we waited count as skipped, like unchanged ones.
        summary.objects_skipped = (
            summary.objects_seen - summary.objects_ingested - summary.objects_rejected
        )
    committed = {v for outcome in outcomes for v in outcome.versions}
    summary.new_versions = sort_versions(committed - planned.versions_before)
    summary.elapsed_s = round(time.perf_counter() - started, 3)
    return summary


__all__ = [
    "IngestOptions",
    "Plan",
    "Warehouse",
    "finish",
    "idle_summary",
    "ingest_batch",
    "ingest_normalized_batch",
    "ingestor_for",
    "plan",
    "recover",
    "require_objects",
]
