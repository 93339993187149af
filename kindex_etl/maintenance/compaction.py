"""Compaction: delta-rs rewrites each Delta table's small files, one kindex commit records it.

delta-rs (`DeltaTable.optimize.compact`) commits to each table's Delta log alone. The kindex
log, which every writer commits to, then takes the result over: a `compact` record adds the
files each Delta log holds that the kindex log does not and retires those it dropped, once
both are seen to hold the same rows. Taking that difference, not the optimizer's report, makes
a crash harmless: a compaction that died after delta-rs committed is recorded by the next one.
A writer that commits in between publishes its state over the table (the same rows); the
difference then no longer holds at the head, and the compaction starts over. delta-rs's adds
carry its files' statistics itself, for the table's `delta.dataSkippingStatsColumns` (set by the
publish, `delta._stats_columns`): the same columns as the ingest's files.

`document_files` (`delta._publish_documents`) is one file, replaced when the listing changes:
nothing to merge; the vacuum deletes the replaced files (`vacuuming.vacuum_tables`).

JSON documents are no Delta table: a kind's small files are concatenated here (whole zstd
frames, so one valid stream), first-fit up to the target rows, in the same commit. Quarantine
files a replay settled are not in the quarantine's Delta table and stay as they are.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from datetime import timedelta

from deltalake import WriterProperties
from deltalake.exceptions import CommitFailedError

from kindex_etl.config import settings
from kindex_etl.errors import PreconditionFailed, StorageError
from kindex_etl.load import delta, layout
from kindex_etl.load.faults import fault_point
from kindex_etl.load.record import COMPACT, CommitRecord, FileEntry
from kindex_etl.load.state import LiveFile, WarehouseState
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.scratch import ScratchDir

COMMIT_ATTEMPTS = 8
# The ingest's own Parquet settings (`writers.PARQUET_OPTIONS`).
WRITER_PROPERTIES = WriterProperties(compression="ZSTD", compression_level=1)


@dataclass
class CompactResult:
    commit: int | None = None  # None: nothing to compact
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


def plan_documents(state: WarehouseState, target_rows: int) -> list[list[LiveFile]]:
    """The document files that would be concatenated now, a list per output file."""
    groups: list[list[LiveFile]] = []
    for table, files in sorted(state.tables.items()):
        if table.startswith("documents/"):
            small = [f for f in files.values() if f.rows < target_rows]
            groups += [g for g in _first_fit(small, target_rows) if len(g) > 1]
    return groups


def stage_documents(
    warehouse: Warehouse, groups: list[list[LiveFile]], batch: str
) -> tuple[list[FileEntry], list[str]]:
    """Concatenate and stage each group; the files to add and the files to retire."""
    scratch = ScratchDir.create(f"compact-{batch}")
    try:
        files: list[FileEntry] = []
        retires: list[str] = []
        for n, group in enumerate(groups):
            key = layout.part_key(layout.table_of(group[0].key), batch, n)
            path = scratch.path / key
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as out:
                for f in group:  # at their final keys: `compact` rolled every commit forward
                    with warehouse.store.open_read(f.key) as fh:
                        shutil.copyfileobj(fh, out, 1 << 20)
            warehouse.stage(batch, key, path)
            files.append(FileEntry(key=key, rows=sum(f.rows for f in group)))
            retires += [f.key for f in group]
        return files, retires
    finally:
        scratch.remove()


def compact_tables(warehouse: Warehouse, target_rows: int) -> None:
    """delta-rs compacts every Delta table (each commit to its own log), to files of about
    `target_rows` rows: its target is bytes, so at the table's mean bytes per row."""
    options = delta.storage_options(warehouse.store)
    for table in delta.PUBLISH_ORDER:
        dt = delta.open_table(warehouse.store, table, options)
        if dt is None:
            continue
        adds = dt.get_add_actions(flatten=True)
        rows = sum(adds.column("num_records").to_pylist())
        size = sum(adds.column("size_bytes").to_pylist())
        if adds.num_rows < 2 or rows == 0:
            continue
        try:
            dt.optimize.compact(
                target_size=max(1, size * target_rows // rows), writer_properties=WRITER_PROPERTIES
            )
        except CommitFailedError:
            continue  # a publish removed files it rewrote: the difference will not hold


def recorded_difference(warehouse: Warehouse) -> tuple[list[FileEntry], list[str]] | None:
    """What the Delta tables hold that the log does not, and what they dropped that it lists;
    None when a table is not at the head (a publish of a newer commit, or one not done)."""
    state, head = warehouse.state, warehouse.head
    options = delta.storage_options(warehouse.store)
    files: list[FileEntry] = []
    retires: list[str] = []
    for table in delta.PUBLISH_ORDER:
        dt = delta.open_table(warehouse.store, table, options)
        if dt is None:
            continue
        if (dt.transaction_version(delta.LOG_APP) or 0) != head:
            return None
        listed = delta.published_files(state, table)
        held = delta.table_files(dt, table)
        new = {k: n for k, n in held.items() if k not in listed}
        gone = [k for k in listed if k not in held]
        added, dropped = sum(new.values()), sum(listed[k].rows for k in gone)
        if added != dropped:
            raise StorageError(
                f"{table}: not recorded: new files hold {added} rows, gone {dropped}"
            )
        for key in new:
            if warehouse.store.head(key) is None:
                raise StorageError(f"{table}: the Delta table lists {key}, which is not there")
        files += [FileEntry(key=k, rows=n) for k, n in new.items()]
        retires += gone
    return files, retires


def _file_counts(state: WarehouseState) -> dict[str, int]:
    return {t: len(files) for t, files in sorted(state.tables.items()) if files}


def _checkpoint(warehouse: Warehouse) -> None:
    """A checkpoint at the head when anything was committed since the last one: start-ups
    read the run files committed since the last one, and compacted files hold old runs (an
    hourly ingest after a 4.4M-run one: 4.7 s without, 1.8 s with; the checkpoint rewrites the
    run index once a day, docs/performance.md). README, "Compaction, vacuum, checkpoints"."""
    if settings().checkpoint_interval > 0 and warehouse.records:
        warehouse.maybe_checkpoint(interval=1)


def compact(
    warehouse_url: str,
    *,
    target_rows: int | None = None,
    orphan_grace: timedelta | None = None,
) -> CompactResult:
    """Merge small files into files of about `target_rows` rows, in one commit; idempotent."""
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
        warehouse.update_snapshot()  # the Delta tables at the head: the difference is ours
        result = CompactResult(files_before=_file_counts(warehouse.state))
        compact_tables(warehouse, target)
        fault_point("compact_after_delta")
        difference = recorded_difference(warehouse)
        if difference is None:
            continue
        files, retires = difference
        groups = plan_documents(warehouse.state, target)
        if not files and not groups:
            _checkpoint(warehouse)  # one that crashed before its checkpoint
            result.files_after = result.files_before
            return result
        retired = [str(warehouse.head), *retires, *(f.key for g in groups for f in g)]
        batch = hashlib.sha256("\n".join(["compact", *retired]).encode()).hexdigest()[:16]
        documents, retired_documents = stage_documents(warehouse, groups, batch)
        record = CommitRecord(
            batch=batch, kind=COMPACT, files=files + documents, retires=retires + retired_documents
        )
        fault_point("compact_after_stage")
        try:
            seq = warehouse.commit(record)
        except PreconditionFailed:
            # An ingest or another compaction was first: start over from the new head.
            warehouse.discard(batch)
            continue
        fault_point("compact_after_commit")
        warehouse.publish(record)
        fault_point("compact_after_publish")
        warehouse.update_snapshot()
        fault_point("compact_before_checkpoint")
        _checkpoint(warehouse)
        result.commit = seq
        result.files_retired = len(record.retires)
        result.files_added = len(record.files)
        result.rows = sum(f.rows for f in record.files)
        result.files_after = _file_counts(warehouse.state)
        return result
    raise StorageError(
        f"gave up compacting after {COMMIT_ATTEMPTS} commit conflicts on {warehouse.store.url}"
    )
