"""The ingest, as plain functions: discover, read, normalize, write, commit, trigger.

Flows in `flows/` orchestrate these; everything here runs and tests without Prefect.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from packaging.version import Version

from .catalog import Catalog, default_catalog
from .extract.discover import Candidate, discover, pending
from .extract.read import BadFile, RowBatch, read_batches
from .load import layout
from .load.commit import Warehouse, fault_point
from .load.descriptor_tables import descriptor_tables
from .load.writers import ParquetTableWriter, RunsWriter, WrittenFile
from .normalize.columnar import (
    QUARANTINE_SCHEMA,
    RUN_WRITE_SCHEMA,
    ColumnarNormalizer,
    quarantine_table,
)
from .normalize.dedup import RunIndex
from .normalize.rows import UPSTREAM_COLUMNS
from .pipelining import Background, prefetch
from .storage import ObjectStore, PreconditionFailed, StorageError, open_store
from .summary import IngestSummary, ObjectReport

MAX_OBJECTS_PER_COMMIT = 256
MAX_BYTES_PER_COMMIT = 8 << 30
COMMIT_ATTEMPTS = 8
FILE_LEVEL_REASONS = frozenset(
    {"bad_header", "empty_file", "bad_encoding", "unreadable", "malformed_row"}
)


def _default_orphan_grace() -> timedelta:
    """KINDEX_ORPHAN_GRACE_S (Settings.orphan_grace_s, default 1 h)."""
    from .config import settings

    return timedelta(seconds=settings().orphan_grace_s)


@dataclass
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


@dataclass
class Source:
    """One stream of upstream rows: an object, or held-back rows being replayed."""

    key: str
    etag: str
    software: str
    batches: Callable[[], Iterator[RowBatch]]
    size: int = 0
    replay: bool = False  # held-back rows, not an upstream object version


def _batch_id(base_seq: int, sources: Iterable[Source], salt: str) -> str:
    h = hashlib.sha256(f"{base_seq}\n{salt}\n".encode())
    for s in sources:
        h.update(f"{s.key}\0{s.etag}\0{s.software}\n".encode())
    return h.hexdigest()[:16]


class Ingestor:
    """State for one ingest run against one warehouse: caches, run index, counters."""

    def __init__(self, warehouse: Warehouse, catalog: Catalog) -> None:
        self.warehouse = warehouse
        self.catalog = catalog
        self.normalizer = ColumnarNormalizer(catalog)
        self.index = RunIndex()
        self._indexed_seq = -1

    # -- state ------------------------------------------------------------------------------

    def existing_versions(self) -> set[str]:
        return {v for r in self.warehouse.records for v in r.get("versions", [])}

    def existing_digests(self) -> set[str]:
        return {d for r in self.warehouse.records for d in r.get("digests", [])}

    def _rebuild_index(self) -> None:
        """Load the run keys of every committed run, so re-delivered rows become duplicates."""
        if self._indexed_seq == self.warehouse.head:
            return
        self.index = RunIndex()
        table = self.warehouse.read_table(
            layout.RUNS,
            [
                "series_id",
                "observed_at",
                "source_p50",
                "source_p20",
                "source_p80",
                "implementation_digest",
                "workload_digest",
            ],
        )
        if table is not None and table.num_rows:
            keys, fps = self.normalizer.keys_of_stored(table)
            self.index.add(keys, fps)
        self._indexed_seq = self.warehouse.head

    def committed(self) -> None:
        """The batch just processed is in the log: the run index matches the warehouse again."""
        self._indexed_seq = self.warehouse.head

    # -- one commit batch -------------------------------------------------------------------

    def process(
        self,
        sources: list[Source],
        *,
        salt: str = "",
        replayed_files: list[str] | None = None,
        carry: pa.Table | None = None,
    ) -> tuple[dict[str, Any] | None, list[ObjectReport], Counter[str]]:
        """Normalize and stage `sources` as one batch; return the commit record to write."""
        self._rebuild_index()
        batch = _batch_id(self.warehouse.head, sources, salt)
        workdir = Path(tempfile.mkdtemp(prefix=f"kindex-{batch}-"))
        runs_writer = RunsWriter(workdir, batch, RUN_WRITE_SCHEMA)
        quarantine_writer = ParquetTableWriter(
            workdir, layout.table_key(layout.QUARANTINE, batch), QUARANTINE_SCHEMA
        )
        background = Background()
        # Until this batch commits, the run index holds its keys; any failure must drop them.
        self._indexed_seq = -1
        reports: list[ObjectReport] = []
        reasons: Counter[str] = Counter()
        versions: set[str] = set()
        descriptor_ids: set[int] = set()
        try:
            if carry is not None and carry.num_rows:
                # Held-back rows that a replay cannot change (malformed, bad files) stay open.
                background.submit(lambda: quarantine_writer.write(carry))
            for source in sources:
                report = ObjectReport(
                    key=source.key,
                    etag=source.etag,
                    size=source.size,
                    status="replayed" if source.replay else "ingested",
                )
                reports.append(report)
                try:
                    for rb in prefetch(source.batches()):
                        self._one_batch(
                            source,
                            rb,
                            report,
                            reasons,
                            versions,
                            descriptor_ids,
                            runs_writer,
                            quarantine_writer,
                            background,
                        )
                except BadFile as bad:
                    report.status = "rejected"
                    report.detail = bad.detail
                    report.quarantined += 1
                    reasons[bad.reason] += 1
                    rejection = _held_back_without_row(source, [None], bad.reason, [bad.detail])
                    background.submit(partial(quarantine_writer.write, rejection))
                except StorageError as exc:
                    raise StorageError(f"reading {source.key}: {exc}") from None
            background.close()
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise

        files: list[WrittenFile] = runs_writer.close()
        q = quarantine_writer.close()
        if q is not None:
            files.append(q)
        new_docs = [
            d for i, d in enumerate(self.normalizer.table.descriptors) if i in descriptor_ids
        ]
        known = self.existing_digests()
        digests, descriptor_files = descriptor_tables(workdir, batch, new_docs, known)
        files.extend(descriptor_files)
        done = self.warehouse.done_objects()
        nothing_new = (
            not files and all(done.get(r.key) == r.etag for r in reports) and not replayed_files
        )
        if nothing_new:
            self._indexed_seq = self.warehouse.head  # no key was added
            shutil.rmtree(workdir, ignore_errors=True)
            return None, reports, reasons
        try:
            for f in files:
                self.warehouse.stage(batch, f.key, f.path)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        fault_point("after_stage")
        record = {
            "batch": batch,
            "objects": [
                {
                    "key": r.key,
                    "etag": r.etag,
                    "rows": r.rows,
                    "runs": r.runs,
                    "duplicates": r.duplicates,
                    "quarantined": r.quarantined,
                    "status": r.status,
                }
                for r in reports
                if r.status != "replayed"
            ],
            "files": [{"key": f.key, "rows": f.rows} for f in files],
            "versions": sorted(versions, key=_version_order),
            "digests": sorted(digests),
            "counts": {
                "rows": sum(r.rows for r in reports),
                "runs": sum(r.runs for r in reports),
                "duplicates": sum(r.duplicates for r in reports),
                "quarantined": sum(r.quarantined for r in reports),
                "quarantined_by_reason": dict(sorted(reasons.items())),
            },
            "replayed_files": replayed_files or [],
        }
        return record, reports, reasons

    def _one_batch(
        self,
        source: Source,
        rb: RowBatch,
        report: ObjectReport,
        reasons: Counter[str],
        versions: set[str],
        descriptor_ids: set[int],
        runs_writer: RunsWriter,
        quarantine_writer: ParquetTableWriter,
        background: Background,
    ) -> None:
        report.rows += rb.batch.num_rows + len(rb.malformed)
        nb = self.normalizer.normalize(
            rb.batch,
            source_key=source.key,
            source_etag=source.etag,
            lines=rb.lines,
            software=source.software,
        )
        result = self.index.classify(nb.keys, nb.fingerprints)
        quarantined = [nb.quarantine]
        if result.conflict.any():
            idx = nb.good[result.conflict]
            ext = nb.runs.column("external_id").filter(pa.array(result.conflict)).to_pylist()
            quarantined.append(
                quarantine_table(
                    rb.batch,
                    idx,
                    ["conflicting_duplicate"] * len(idx),
                    [f"{e} was already ingested with other values" for e in ext],
                    source.key,
                    source.etag,
                    rb.lines,
                    source.software,
                )
            )
        if rb.malformed:
            quarantined.append(
                _held_back_without_row(
                    source,
                    [m.line for m in rb.malformed],
                    "malformed_row",
                    [f"{m.detail}: {m.text[:500]}" for m in rb.malformed],
                )
            )
        q = pa.concat_tables(quarantined) if len(quarantined) > 1 else quarantined[0]
        for reason in q.column("reason").to_pylist():
            reasons[reason] += 1
        keep = pa.array(result.keep)
        runs = nb.runs.filter(keep)
        lines = nb.json_lines.filter(keep)
        kept_ids = nb.descriptor_ids[result.keep]
        descriptor_ids.update(np.unique(kept_ids).tolist())
        versions.update(pc.unique(runs.column("liger_version").cast(pa.string())).to_pylist())
        report.runs += runs.num_rows
        report.duplicates += int(result.duplicate.sum())
        report.quarantined += q.num_rows

        def write() -> None:
            runs_writer.write(runs, lines)
            if q.num_rows:
                quarantine_writer.write(q)

        background.submit(write)


def _version_order(version: str) -> Version:
    return Version(version)


def _held_back_without_row(
    source: Source, lines: list[int | None], reason: str, details: list[str]
) -> pa.Table:
    """Quarantine entries that have no parsed row to keep (a bad file, a malformed line)."""
    n = len(lines)
    return pa.table(
        {
            "source_key": [source.key] * n,
            "source_etag": [source.etag] * n,
            "source_row": pa.array(lines, pa.int64()),
            "reason": [reason] * n,
            "detail": details,
            "software": [source.software] * n,
            **{name: pa.array([""] * n, pa.string()) for name in UPSTREAM_COLUMNS},
        },
        schema=QUARANTINE_SCHEMA,
    )


def _chunks(
    candidates: list[Candidate], max_objects: int = MAX_OBJECTS_PER_COMMIT
) -> Iterator[list[Candidate]]:
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


def _source(store: ObjectStore, c: Candidate) -> Source:
    return Source(
        key=c.key,
        etag=c.info.etag,
        software=c.software,
        size=c.info.size,
        batches=lambda: read_batches(store, c.key),
    )


def commit_sources(
    ingestor: Ingestor,
    make_sources: Callable[[], list[Source]],
    summary: IngestSummary,
    *,
    salt: str = "",
    replayed_files: Callable[[], list[str]] | None = None,
    carry: pa.Table | None = None,
) -> None:
    """Process, stage and commit one batch, retrying when a concurrent writer commits first."""
    warehouse = ingestor.warehouse
    for _attempt in range(COMMIT_ATTEMPTS):
        sources = make_sources()
        if not sources:
            return
        replayed = replayed_files() if replayed_files else None
        record, reports, reasons = ingestor.process(
            sources, salt=salt, replayed_files=replayed, carry=carry
        )
        if record is None:
            _count(summary, reports, reasons)
            return
        try:
            seq = warehouse.commit(record)
        except PreconditionFailed:
            # Someone committed first: their work may cover ours. Re-read and redo what's left.
            warehouse.discard(record["batch"])
            warehouse.refresh()
            continue
        ingestor.committed()
        fault_point("after_commit")
        warehouse.publish(record)
        fault_point("after_publish")
        warehouse.update_snapshot()
        summary.commits.append(seq)
        _count(summary, reports, reasons)
        return
    raise StorageError(f"gave up after {COMMIT_ATTEMPTS} commit conflicts on {warehouse.store.url}")


def _count(summary: IngestSummary, reports: list[ObjectReport], reasons: Counter[str]) -> None:
    for r in reports:
        summary.objects.append(r)
        if r.status == "replayed":
            pass
        elif r.status == "rejected":
            summary.objects_rejected += 1
        else:
            summary.objects_ingested += 1
        summary.rows_read += r.rows
        summary.runs_written += r.runs
        summary.duplicate_rows += r.duplicates
        summary.quarantined_rows += r.quarantined
    for reason, n in reasons.items():
        summary.quarantined_by_reason[reason] = summary.quarantined_by_reason.get(reason, 0) + n


def open_warehouse(url: str) -> Warehouse:
    return Warehouse(open_store(url, create=True))


class IngestRun:
    """One ingest, in the steps a flow orchestrates: recover, plan, ingest chunks, finish."""

    def __init__(self, upstream_url: str, warehouse_url: str, options: IngestOptions | None = None):
        self.options = options or IngestOptions()
        self._started = time.perf_counter()
        self.upstream = open_store(upstream_url)
        self.warehouse = open_warehouse(warehouse_url)
        self.summary = IngestSummary(upstream=self.upstream.url, warehouse=self.warehouse.store.url)
        self.ingestor = Ingestor(self.warehouse, self.options.catalog or default_catalog())
        self._candidates: dict[str, Candidate] = {}
        self._versions_before: set[str] = set()

    def recover(self) -> dict[str, int]:
        if self.options.dry_run:
            # A dry run changes nothing: read the log, roll nothing forward, remove nothing.
            self.warehouse.refresh()
            self._versions_before = self.ingestor.existing_versions()
            return self.summary.recovered
        self.summary.recovered = self.warehouse.recover(self.options.orphan_grace)
        self._versions_before = self.ingestor.existing_versions()
        return self.summary.recovered

    def plan(self) -> list[list[str]]:
        """The object keys to ingest, grouped into commit batches."""
        candidates = discover(
            self.upstream, prefix=self.options.prefix, include=self.options.include
        )
        self._candidates = {c.key: c for c in candidates}
        self.summary.objects_seen = len(candidates)
        todo = (
            candidates
            if self.options.backfill
            else pending(candidates, self.warehouse.done_objects())
        )
        if self.options.dry_run:
            self.summary.objects = [
                ObjectReport(key=c.key, etag=c.info.etag, size=c.info.size, status="would-ingest")
                for c in todo
            ]
        chunks = _chunks(todo, max(1, self.options.max_objects_per_commit))
        return [[c.key for c in chunk] for chunk in chunks]

    def ingest_chunk(self, keys: list[str]) -> None:
        chunk = [self._candidates[k] for k in keys]

        def still_pending() -> list[Source]:
            if self.options.backfill:
                return [_source(self.upstream, c) for c in chunk]
            done = self.warehouse.done_objects()
            return [_source(self.upstream, c) for c in chunk if done.get(c.key) != c.info.etag]

        commit_sources(self.ingestor, still_pending, self.summary)

    def finish(self) -> IngestSummary:
        s = self.summary
        # Objects another writer finished while we waited count as skipped, like unchanged ones.
        s.objects_skipped = s.objects_seen - s.objects_ingested - s.objects_rejected
        if self.options.dry_run:
            s.objects_skipped = s.objects_seen - len(s.objects)
        new = self.ingestor.existing_versions() - self._versions_before
        s.new_versions = sorted(new, key=_version_order)
        trigger = self.options.trigger
        if trigger is None:
            trigger = not self.options.backfill
        if trigger and not self.options.dry_run and s.new_versions:
            from .trigger import on_new_versions

            s.reruns_triggered = on_new_versions(
                self.warehouse, self._versions_before, s.new_versions, upstream=self.upstream.url
            )
        s.elapsed_s = round(time.perf_counter() - self._started, 3)
        return s


def ingest(
    upstream_url: str, warehouse_url: str, options: IngestOptions | None = None
) -> IngestSummary:
    """Ingest every new upstream CSV object into the warehouse; returns what happened."""
    run = IngestRun(upstream_url, warehouse_url, options)
    run.recover()
    for keys in run.plan():
        if not run.options.dry_run:
            run.ingest_chunk(keys)
    return run.finish()


def summary_json(summary: IngestSummary) -> str:
    return json.dumps(summary.as_dict(), sort_keys=True)
