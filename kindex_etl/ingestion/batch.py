"""One commit batch: read its sources, normalize, dedup, write files, stage them, build the record.

`Ingestor` holds what an ingest keeps between batches of one warehouse: the normalizer's
descriptor caches and the run index (every committed run's key, so re-delivered rows become
duplicates). It never commits: `ingest.commit` does that with what `process` returns.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from kindex_etl.catalog import Catalog
from kindex_etl.config import settings
from kindex_etl.contracts.tables import QUARANTINE_SCHEMA, RUN_WRITE_SCHEMA
from kindex_etl.contracts.versions import sort_versions
from kindex_etl.errors import BadFile, StorageError
from kindex_etl.extract.read import RowBatch
from kindex_etl.ingestion import progress
from kindex_etl.ingestion.fanout import NormalizedObject
from kindex_etl.ingestion.results import ObjectReport
from kindex_etl.ingestion.threads import Background, prefetch
from kindex_etl.load import layout
from kindex_etl.load.descriptor_tables import descriptor_tables
from kindex_etl.load.faults import fault_point
from kindex_etl.load.record import CommitRecord, Counts, FileEntry
from kindex_etl.load.warehouse import Warehouse
from kindex_etl.load.writers import ParquetTableWriter, RowGroupWriter, RunsWriter, WrittenFile
from kindex_etl.memory import bulk_collector, pin_mmap_threshold, use_bulk_arrow_pool
from kindex_etl.normalize.columnar import (
    STORED_KEY_COLUMNS,
    ColumnarNormalizer,
    NormalizedBatch,
    PreparedBatch,
)
from kindex_etl.normalize.dedup import RunIndex
from kindex_etl.normalize.descriptors import Descriptor
from kindex_etl.normalize.quarantine import held_back_without_row, quarantine_table
from kindex_etl.scratch import ScratchDir, remove_orphaned


@dataclass
class Source:
    """One stream of upstream rows: an object, or held-back rows being replayed."""

    key: str
    etag: str
    software: str
    batches: Callable[[], Iterator[RowBatch]]
    size: int = 0
    replay: bool = False  # held-back rows, not an upstream object version
    # Physical lines of the object: what a file rejected whole counts as read and held back.
    count_lines: Callable[[], int] | None = None
    # Already read and normalized elsewhere (a fanned-out backfill): absorbed, not read.
    normalized: NormalizedObject | None = None


@dataclass
class StagedBatch:
    """What `Ingestor.process` made: the record to commit (None: nothing new) and its reports."""

    record: CommitRecord | None
    reports: list[ObjectReport]
    reasons: Counter[str]


class _RejectedLate(Exception):
    """An object proved bad after some of its rows were handed to the writers."""

    def __init__(self, key: str, bad: BadFile) -> None:
        super().__init__(key)
        self.key = key
        self.bad = bad


# Held-back rows are wide (~500 bytes in memory, every column a string) and come a few
# thousand a CSV block: row groups of ~16k rows, not one per block nor 64k rows waiting.
QUARANTINE_ROW_GROUP_BYTES = 8 << 20


def held_keys(table: pa.Table) -> list[tuple[object, ...]]:
    """What says a held-back row is the same one held back for the same reason."""
    columns = ("source_key", "source_etag", "source_row", "reason", "detail")
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def batch_id(base_seq: int, sources: Iterable[Source], salt: str) -> str:
    """Deterministic: two writers that ingest the same sources from one base share the id."""
    h = hashlib.sha256(f"{base_seq}\n{salt}\n".encode())
    for s in sources:
        h.update(f"{s.key}\0{s.etag}\0{s.software}\n".encode())
    return h.hexdigest()[:16]


@dataclass
class _Work:
    """The files and tallies of the batch being processed.

    Kept rows become run columns and documents on the builder thread, files on the writer
    thread. Every write goes through the builder, so files get their rows in the order the
    normalizing thread handed them over, whatever the threads' timing.
    """

    runs: RunsWriter
    quarantine: RowGroupWriter
    builder: Background = field(default_factory=partial(Background, "kindex-builder"))
    # Deeper: the writer's work is bursty (see KINDEX_WRITE_AHEAD in config.py).
    writer: Background = field(
        default_factory=lambda: Background("kindex-writer", settings().write_ahead)
    )
    reasons: Counter[str] = field(default_factory=Counter)
    versions: set[str] = field(default_factory=set)
    descriptor_ids: set[int] = field(default_factory=set)
    digests: set[str] = field(default_factory=set)  # descriptor digests new to the warehouse
    # (key, etag, line, reason, detail) of every row held back, when a replay asks for it.
    held: Counter[tuple[object, ...]] | None = None
    # For every protocol, environment, workload and implementation digest this batch's runs
    # use, one descriptor that carries it: what the batch's descriptor tables are written from.
    harvested: list[Descriptor] = field(default_factory=list)
    harvested_digests: set[str] = field(default_factory=set)


def _write(work: _Work, job: Callable[[], None]) -> None:
    """Hand `job` to the writer in order: behind what the builder is still making."""
    work.builder.submit(partial(work.writer.submit, job))


def _stop(work: _Work) -> None:
    """Wait for the builder, then the writer; either's error is raised here."""
    try:
        work.builder.close()
    finally:
        # Whatever the builder did, the writer must be gone before the work folder is.
        work.writer.close()


def _abort(work: _Work) -> None:
    work.builder.abort()
    work.writer.abort()


def _harvest(work: _Work, descriptors: list[Descriptor]) -> None:
    """Move the descriptors the batch's runs use out of the table's ids into `harvested`."""
    seen = work.harvested_digests
    for i in sorted(work.descriptor_ids):
        d = descriptors[i]
        digests = (d.protocol_digest, d.environment_digest, d.workload_digest,
                   d.implementation_digest)  # fmt: skip
        if not seen.issuperset(digests):
            work.harvested.append(d)
            seen.update(digests)
    work.descriptor_ids.clear()


class Ingestor:
    """State for ingests into one warehouse: descriptor caches, run index."""

    def __init__(self, warehouse: Warehouse, catalog: Catalog, *, fresh: bool = False) -> None:
        """`fresh`: build as if the warehouse were empty (no run is a duplicate of a committed
        one, every descriptor is new): what a reprocess, which replaces everything, needs."""
        self.warehouse = warehouse
        self.catalog = catalog
        self.fresh = fresh
        self.normalizer = ColumnarNormalizer(catalog)
        cfg = settings()
        # Resolved descriptors kept before they are dropped (see reset_descriptors).
        self.descriptor_cap = cfg.descriptor_cap
        self.index_spill = cfg.index_spill
        self.index = RunIndex(spill=self.index_spill)
        self._indexed_seq = -1
        # A process starts an ingestor once per warehouse: the moment to sweep up after runs
        # that were killed (their work folders hold up to a batch of Parquet each), and to
        # have large frees returned to the system for the long ingest ahead.
        remove_orphaned()
        pin_mmap_threshold()
        use_bulk_arrow_pool()

    def _rebuild_index(self) -> None:
        """Load the run keys of every committed run, so re-delivered rows become duplicates."""
        if self._indexed_seq == self.warehouse.head:
            return
        self.index = RunIndex(spill=self.index_spill)
        if not self.fresh:
            for keys, fps in self._stored_keys():
                self.index.add(keys, fps)
        self._indexed_seq = self.warehouse.head

    def _stored_keys(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every committed run's key: the checkpoint's run index and the run files since it,
        or (no usable index) every run file."""
        kept = self.warehouse.run_index()
        if kept is None:
            # One run file at a time: the whole table's key columns at once held 2.9 GiB for
            # 4.4M runs (`benchmarks/bench_run_index.py`, docs/performance.md, "Speed, stop 21").
            files = list(self.warehouse.state.tables.get(layout.RUNS, {}))
        else:
            index, files = kept
            if index.num_rows:
                yield self.normalizer.keys_of_index(index)
        batch_of = self.warehouse.batch_of()
        for key in files:
            table = self.warehouse.read_file(batch_of[key], key, STORED_KEY_COLUMNS)
            if table.num_rows:
                yield self.normalizer.keys_of_stored(table)

    def committed(self) -> None:
        """The batch just processed is in the log: the run index matches the warehouse again."""
        self._indexed_seq = self.warehouse.head

    def process(
        self,
        sources: list[Source],
        *,
        salt: str = "",
        replayed_files: list[str] | None = None,
        carry: pa.Table | None = None,
        unchanged_if: Counter[tuple[object, ...]] | None = None,
    ) -> StagedBatch:
        """Normalize and stage `sources` as one batch; return the commit record to write.

        `unchanged_if` (a replay): the held-back rows it replays, as `held_key` tuples. When
        no row became a run and exactly these rows are held back again, for the same reasons,
        there is nothing to commit (no record, no new quarantine file).

        An object is all or nothing: one that turns out bad after some of its rows were
        written (bytes that stop being UTF-8 in a later block) makes the batch start over with
        that object rejected up front, so no part of it is in the commit.
        """
        batch = batch_id(self.warehouse.head, sources, salt)
        rejected: dict[str, BadFile] = {}
        with bulk_collector():
            while True:
                self._rebuild_index()
                try:
                    return self._process_once(
                        batch, sources, rejected, replayed_files, carry, unchanged_if
                    )
                except _RejectedLate as late:
                    rejected[late.key] = late.bad

    def _process_once(
        self,
        batch: str,
        sources: list[Source],
        rejected: dict[str, BadFile],
        replayed_files: list[str] | None,
        carry: pa.Table | None,
        unchanged_if: Counter[tuple[object, ...]] | None,
    ) -> StagedBatch:
        workdir = ScratchDir.create(batch)
        work = _Work(
            runs=RunsWriter(workdir.path, batch, RUN_WRITE_SCHEMA),
            quarantine=RowGroupWriter(
                ParquetTableWriter(
                    workdir.path, layout.table_key(layout.QUARANTINE, batch), QUARANTINE_SCHEMA
                ),
                max_bytes=QUARANTINE_ROW_GROUP_BYTES,
            ),
            held=Counter() if unchanged_if is not None else None,
        )
        # Until this batch commits, the run index holds its keys; any failure must drop them.
        self._indexed_seq = -1
        reports: list[ObjectReport] = []
        try:
            try:
                if carry is not None and carry.num_rows:
                    # Held-back rows that a replay cannot change (malformed, bad files) stay open.
                    _write(work, partial(work.quarantine.write, carry))
                for source in sources:
                    report = ObjectReport(
                        key=source.key,
                        etag=source.etag,
                        size=source.size,
                        status="replayed" if source.replay else "ingested",
                    )
                    reports.append(report)
                    if source.key in rejected and not source.replay:
                        self._reject(source, report, work, rejected[source.key])
                    else:
                        self._read_source(source, report, work)
                _stop(work)
            finally:
                # The threads must be gone before their folder is: else the writer writes a
                # file into a removed folder, recreating it after the cleanup.
                _abort(work)
            if (
                unchanged_if is not None
                and work.held == unchanged_if
                and not any(r.runs or r.duplicates for r in reports)
            ):
                self._indexed_seq = self.warehouse.head  # no key was added
                return StagedBatch(None, reports, work.reasons)
            files = self._close(work, workdir.path, batch)
            if not files and not replayed_files and self._all_done(reports):
                self._indexed_seq = self.warehouse.head  # no key was added
                return StagedBatch(None, reports, work.reasons)
            for f in files:
                self.warehouse.stage(batch, f.key, f.path)
        finally:
            workdir.remove()
        fault_point("after_stage")
        return StagedBatch(
            _record(batch, reports, files, work, replayed_files), reports, work.reasons
        )

    def _read_source(self, source: Source, report: ObjectReport, work: _Work) -> None:
        if source.normalized is not None:
            self._absorb_object(source, source.normalized, report, work)
            return
        submitted = False
        try:
            for rb in prefetch(source.batches()):
                self._one_batch(source, rb, report, work)
                submitted = True
        except BadFile as bad:
            if submitted:
                raise _RejectedLate(source.key, bad) from None
            self._reject(source, report, work, bad)
        except StorageError as exc:
            raise StorageError(f"reading {source.key}: {exc}") from None

    def _absorb_object(
        self, source: Source, obj: NormalizedObject, report: ObjectReport, work: _Work
    ) -> None:
        """An object a worker normalized: the same dedup and writes as one read here."""
        if obj.rejected is not None:
            self._reject(source, report, work, BadFile(*obj.rejected))
            return
        # Ids so far index this process's descriptors; the object's index its own list.
        _harvest(work, self.normalizer.table.descriptors)
        for block in obj.iter_blocks():
            # Keys are this process's (series numbers are per process): made from the runs.
            keys, fingerprints = self.normalizer.keys_of_stored(block.runs)
            nb = NormalizedBatch(
                runs=block.runs,
                json_lines=block.json_lines,
                quarantine=block.quarantine,
                descriptor_ids=block.descriptor_ids,
                keys=keys,
                fingerprints=fingerprints,
                good=block.good,
            )
            self._absorb(source, block.read, nb, report, work)
        _harvest(work, obj.descriptors)

    def _reject(self, source: Source, report: ObjectReport, work: _Work, bad: BadFile) -> None:
        """The whole object is held back: each of its lines counts as read and held back."""
        lines = source.count_lines() if source.count_lines is not None else max(report.rows, 1)
        report.status = "rejected"
        report.detail = bad.detail
        report.rows = lines
        report.runs = report.duplicates = 0
        report.quarantined = lines
        work.reasons[bad.reason] += lines
        rejection = held_back_without_row(
            source.key, source.etag, source.software, [None], bad.reason, [bad.detail]
        )
        _write(work, partial(work.quarantine.write, rejection))

    def _one_batch(self, source: Source, rb: RowBatch, report: ObjectReport, work: _Work) -> None:
        prepared = self.normalizer.prepare(
            rb.batch,
            source_key=source.key,
            source_etag=source.etag,
            lines=rb.lines,
            software=source.software,
        )
        self._absorb(source, rb, prepared, report, work)
        if self.normalizer.descriptors_over(self.descriptor_cap):
            _harvest(work, self.normalizer.table.descriptors)
            self.normalizer.reset_descriptors()

    def _absorb(
        self,
        source: Source,
        rb: RowBatch,
        nb: PreparedBatch | NormalizedBatch,
        report: ObjectReport,
        work: _Work,
    ) -> None:
        """Classify a block against the run index, tally it, hand its kept rows on to be built
        and written.

        `work.descriptor_ids` gathers the indices (into whichever descriptor list `nb` was
        made against) of the descriptors its kept runs use; the caller harvests them.
        """
        read = rb.batch.num_rows + len(rb.malformed)
        report.rows += read
        progress.rows_read(source.key, read, rb.offset)
        result = self.index.classify(nb.keys, nb.fingerprints)
        held = [nb.quarantine]
        if result.conflict.any():
            idx = nb.good[result.conflict]
            ext = nb.external_ids(result.conflict)
            held.append(
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
            held.append(
                held_back_without_row(
                    source.key,
                    source.etag,
                    source.software,
                    [m.line for m in rb.malformed],
                    "malformed_row",
                    [f"{m.detail}: {m.text[:500]}" for m in rb.malformed],
                )
            )
        q = pa.concat_tables(held) if len(held) > 1 else held[0]
        work.reasons.update(q.column("reason").to_pylist())
        if work.held is not None:
            work.held.update(held_keys(q))
        keep = result.keep
        kept = int(keep.sum())
        # Ids are small and dense (below the descriptor cap): a count, not a sort.
        work.descriptor_ids.update(np.flatnonzero(np.bincount(nb.descriptor_ids[keep])).tolist())
        work.versions.update(nb.versions(keep))
        report.runs += kept
        report.duplicates += int(result.duplicate.sum())
        report.quarantined += q.num_rows

        def build() -> None:  # on the builder thread
            if kept:
                runs, lines = nb.build(keep)
                work.writer.submit(partial(work.runs.write, runs, lines))
            if q.num_rows:
                work.writer.submit(partial(work.quarantine.write, q))

        work.builder.submit(build)

    def _close(self, work: _Work, workdir: Path, batch: str) -> list[WrittenFile]:
        files: list[WrittenFile] = work.runs.close()
        q = work.quarantine.close()
        if q is not None:
            files.append(q)
        _harvest(work, self.normalizer.table.descriptors)
        new_docs = work.harvested
        work.digests, descriptor_files = descriptor_tables(
            workdir, batch, new_docs, set() if self.fresh else self.warehouse.digests()
        )
        return files + descriptor_files

    def _all_done(self, reports: list[ObjectReport]) -> bool:
        done = self.warehouse.done_objects()
        return all(done.get(r.key) == r.etag for r in reports)


def _record(
    batch: str,
    reports: list[ObjectReport],
    files: list[WrittenFile],
    work: _Work,
    replayed_files: list[str] | None,
) -> CommitRecord:
    return CommitRecord(
        batch=batch,
        objects=[r.entry() for r in reports if r.status != "replayed"],
        files=[FileEntry(key=f.key, rows=f.rows) for f in files],
        versions=sort_versions(work.versions),
        digests=sorted(work.digests),
        counts=Counts(
            rows=sum(r.rows for r in reports),
            runs=sum(r.runs for r in reports),
            duplicates=sum(r.duplicates for r in reports),
            quarantined=sum(r.quarantined for r in reports),
            quarantined_by_reason=dict(sorted(work.reasons.items())),
        ),
        replayed_files=replayed_files or [],
    )
