"""Compaction as a commit: small files of a table and partition rewritten into large ones.

One commit adds the new files and retires the old (`CommitRecord.retires`): a reader of any
snapshot, before or after, sees exactly the same rows, and the old files stay in place for
readers of older snapshots until `vacuum` deletes them after the retention period.

Which files merge is a first-fit packing, by row count, of the files below the target: any
two output files (or untouched ones) of one partition then hold more than the target rows
together, so compacting compacted data finds nothing to merge and commits nothing. Rows keep
the snapshot's order; Parquet is re-encoded with the ingest's own writer and schemas, JSON
lines are byte-concatenated (each file is whole zstd frames, so the concatenation is one
valid stream of the same lines).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from kindex_etl.config import settings
from kindex_etl.contracts.tables import (
    ENVIRONMENT_SCHEMA,
    IMPLEMENTATION_SCHEMA,
    PROTOCOL_SCHEMA,
    QUARANTINE_SCHEMA,
    REGRESSIONS_SCHEMA,
    RUN_WRITE_SCHEMA,
    TRIAGE_SCHEMA,
    WORKLOAD_SCHEMA,
)
from kindex_etl.errors import PreconditionFailed, StorageError
from kindex_etl.load import layout
from kindex_etl.load.faults import fault_point
from kindex_etl.load.record import COMPACT, CommitRecord, FileEntry
from kindex_etl.load.state import LiveFile, WarehouseState
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.load.writers import ParquetTableWriter, RowGroupWriter
from kindex_etl.scratch import ScratchDir

COMMIT_ATTEMPTS = 8

# How each Parquet table is written: the ingest's schemas, so a compacted file reads the same.
WRITE_SCHEMAS: dict[str, pa.Schema] = {
    layout.RUNS: RUN_WRITE_SCHEMA,
    layout.PROTOCOLS: PROTOCOL_SCHEMA,
    layout.ENVIRONMENTS: ENVIRONMENT_SCHEMA,
    layout.WORKLOADS: WORKLOAD_SCHEMA,
    layout.IMPLEMENTATIONS: IMPLEMENTATION_SCHEMA,
    layout.QUARANTINE: QUARANTINE_SCHEMA,
    # The chained analysis appends one file per run that found something new (issue 32).
    layout.REGRESSIONS: REGRESSIONS_SCHEMA,
    # One file per verdict: a few a day, compacted like the rest.
    layout.TRIAGE: TRIAGE_SCHEMA,
}


@dataclass(frozen=True)
class Group:
    """Files of one table and partition that become one file."""

    table: str
    partition: str
    files: tuple[LiveFile, ...]
    replayed: bool = False  # quarantine files already settled: the output is settled too

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass
class CompactResult:
    commit: int | None = None  # None: nothing to compact
    groups: int = 0
    files_retired: int = 0
    files_added: int = 0
    rows: int = 0
    files_before: dict[str, int] = field(default_factory=dict)
    files_after: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _first_fit(files: list[LiveFile], target_rows: int) -> list[list[LiveFile]]:
    bins: list[list[LiveFile]] = []
    loads: list[int] = []
    for f in files:
        for i, load in enumerate(loads):
            if load + f.rows <= target_rows:
                bins[i].append(f)
                loads[i] += f.rows
                break
        else:
            bins.append([f])
            loads.append(f.rows)
    return bins


def plan(state: WarehouseState, target_rows: int) -> list[Group]:
    """The merges compaction would commit now (empty: nothing to do)."""
    groups: list[Group] = []
    for table, files in sorted(state.tables.items()):
        # Partition, and for quarantine whether replayed: files of one key may merge.
        buckets: dict[tuple[str, bool], list[LiveFile]] = {}
        for f in files.values():
            if f.rows >= target_rows:
                continue
            replayed = f.key in state.replayed
            buckets.setdefault((layout.partition_of(f.key), replayed), []).append(f)
        for (partition, replayed), small in sorted(buckets.items()):
            for packed in _first_fit(small, target_rows):
                if len(packed) > 1:
                    groups.append(Group(table, partition, tuple(packed), replayed))
    return groups


def _batch_id(base_seq: int, groups: list[Group]) -> str:
    h = hashlib.sha256(f"compact\n{base_seq}\n".encode())
    for g in groups:
        for f in g.files:
            h.update(f"{f.key}\n".encode())
    return h.hexdigest()[:16]


def _read_parquet(warehouse: Warehouse, f: LiveFile) -> Iterator[pa.RecordBatch]:
    yield from warehouse.read_file(f.batch, f.key).to_batches()


def _write_parquet(warehouse: Warehouse, group: Group, workdir: Path, key: str) -> int:
    file = ParquetTableWriter(workdir, key, WRITE_SCHEMAS[group.table])
    writer = RowGroupWriter(file)
    # One input file at a time, out in row groups of the ingest's size: memory stays at about
    # one input file plus one row group, whatever the target.
    for f in group.files:
        for rb in _read_parquet(warehouse, f):
            writer.write(pa.Table.from_batches([rb]))
    written = writer.close()
    if written is None:  # every input empty: an empty file still stands for them
        file.write(WRITE_SCHEMAS[group.table].empty_table())
        written = file.close()
    assert written is not None
    return written.rows


def _copy_object(warehouse: Warehouse, f: LiveFile, out: object) -> None:
    for candidate in (f.key, layout.staging_key(f.batch, f.key), f.key):
        try:
            with warehouse.store.open_read(candidate) as fh:
                shutil.copyfileobj(fh, out, 1 << 20)  # type: ignore[arg-type]
            return
        except (FileNotFoundError, StorageError):
            continue
    raise StorageError(f"live file {f.key} is missing")


def _write_documents(warehouse: Warehouse, group: Group, workdir: Path, key: str) -> int:
    path = workdir / key
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for f in group.files:
            _copy_object(warehouse, f, out)
    return group.rows


def stage_groups(warehouse: Warehouse, groups: list[Group], batch: str) -> CommitRecord:
    """Write and stage every group's output; return the record that would commit them."""
    scratch = ScratchDir.create(f"compact-{batch}")
    workdir = scratch.path
    try:
        files: list[FileEntry] = []
        retires: list[str] = []
        replayed: list[str] = []
        parts: dict[tuple[str, str], int] = {}
        for g in groups:
            n = parts[(g.table, g.partition)] = parts.get((g.table, g.partition), -1) + 1
            key = layout.part_key(g.table, batch, n, g.partition)
            if g.table.startswith("documents/"):
                rows = _write_documents(warehouse, g, workdir, key)
            else:
                rows = _write_parquet(warehouse, g, workdir, key)
            if rows != g.rows:
                raise StorageError(f"compacting into {key}: read {rows} rows, expected {g.rows}")
            warehouse.stage(batch, key, workdir / key)
            files.append(FileEntry(key=key, rows=rows))
            retires.extend(f.key for f in g.files)
            if g.replayed:
                replayed.append(key)
        return CommitRecord(
            batch=batch, kind=COMPACT, files=files, retires=retires, replayed_files=replayed
        )
    finally:
        scratch.remove()


def _file_counts(state: WarehouseState) -> dict[str, int]:
    return {t: len(files) for t, files in sorted(state.tables.items()) if files}


def _checkpoint(warehouse: Warehouse) -> None:
    """A checkpoint at the head when anything was committed since the last one.

    A writer's start-up reads the run files committed since the checkpoint besides its run
    index. Compacted files hold old runs too, and a backfill's hold millions: until the next
    checkpoint (`checkpoint_interval` commits: two days of hourly ingests and their analyses)
    every start-up re-read them (an hourly ingest of 3,000 rows after a 4.4M-run one took
    4.7 s, 4.3 of them there; 1.8 s after a checkpoint). The checkpoint rewrites the whole
    run index (8.6 s at 4.4M runs), once a day in the daily job. The hourly analyses read the
    records before it back from the log (`series.touched_since`).
    """
    if settings().checkpoint_interval > 0 and warehouse.records:
        warehouse.maybe_checkpoint(interval=1)


def compact(
    warehouse_url: str,
    *,
    target_rows: int | None = None,
    orphan_grace: timedelta | None = None,
) -> CompactResult:
    """Merge small files into files of up to `target_rows` rows, in one commit; idempotent."""
    target = target_rows if target_rows is not None else settings().compact_target_rows
    grace = (
        orphan_grace if orphan_grace is not None else timedelta(seconds=settings().orphan_grace_s)
    )
    warehouse = open_warehouse(warehouse_url)
    # A compaction that crashed after its commit is finished here; one that crashed before
    # it left staging under the same batch id it gets again below, re-staged and committed.
    warehouse.recover(grace)
    for _attempt in range(COMMIT_ATTEMPTS):
        warehouse.refresh()
        state = warehouse.state
        result = CompactResult(files_before=_file_counts(state))
        groups = plan(state, target)
        if not groups:
            _checkpoint(warehouse)  # one that crashed before its checkpoint
            result.files_after = result.files_before
            return result
        batch = _batch_id(warehouse.head, groups)
        record = stage_groups(warehouse, groups, batch)
        fault_point("compact_after_stage")
        try:
            seq = warehouse.commit(record)
        except PreconditionFailed:
            # An ingest or another compaction was first: plan again from the new head.
            warehouse.discard(batch)
            continue
        fault_point("compact_after_commit")
        warehouse.publish(record)
        fault_point("compact_after_publish")
        warehouse.update_snapshot()
        fault_point("compact_before_checkpoint")
        _checkpoint(warehouse)
        result.commit = seq
        result.groups = len(groups)
        result.files_retired = len(record.retires)
        result.files_added = len(record.files)
        result.rows = sum(g.rows for g in groups)
        result.files_after = _file_counts(warehouse.state)
        return result
    raise StorageError(
        f"gave up compacting after {COMMIT_ATTEMPTS} commit conflicts on {warehouse.store.url}"
    )
