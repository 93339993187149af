"""The commit protocol: stage, commit, publish; and the state every run starts from.

1. Data files are staged under `_kindex/staging/<batch>/<final key>`: invisible to readers of
   the table folders.
2. One commit record `_kindex/log/<seq>.json` is created with a conditional create
   (If-None-Match). That is the single atomic step: two writers can never both take a sequence
   number, and a writer that loses re-reads the log and redoes only what is still undone.
3. The staged files are published to their final keys, then `_kindex/snapshot.json` (every
   published file, by table) is advanced with a compare-and-swap on its ETag.

A crash before 2 leaves only staging, removed later as an orphan; a crash after 2 is rolled
forward by the next run (`recover`). Which upstream object versions are done is read from the
log, so any worker can continue where another stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kindex_etl.contracts.tables import millisecond_timestamps
from kindex_etl.load import delta, layout
from kindex_etl.load.faults import fault_point
from kindex_etl.load.record import CommitRecord, FileEntry, Writer
from kindex_etl.load.state import WarehouseState
from kindex_etl.storage import (
    NotFound,
    ObjectStore,
    PreconditionFailed,
    StorageError,
    open_store,
    store_url,
)


def utcnow() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def open_warehouse(url: str, *, create: bool = True) -> Warehouse:
    """The warehouse at `url`; `create=False` for readers, which must never make a folder."""
    return Warehouse(open_store(url, create=create))


def existing_warehouse(url: str) -> Warehouse | None:
    """The warehouse at `url` if there is one, else None; creates nothing (dry runs, readers).

    A bucket is always "there" (an empty prefix is an empty warehouse); a local folder that
    does not exist is no warehouse yet.
    """
    try:
        warehouse = open_warehouse(url, create=False)
    except StorageError:
        if store_url(url).startswith("s3://"):
            raise
        return None
    warehouse.refresh()
    return warehouse


@dataclass
class Warehouse:
    """A warehouse's store and what its log says.

    `records` holds the commit records read since the base checkpoint (all of them when there
    is none); `state` is the log folded up to `head`, from that checkpoint forward.
    """

    store: ObjectStore
    _records: dict[int, CommitRecord] = field(default_factory=dict)
    _base: WarehouseState | None = None
    _state: WarehouseState = field(default_factory=WarehouseState)
    _opened: bool = False

    # -- reading the state ------------------------------------------------------------------

    def refresh(self) -> list[CommitRecord]:
        """Read the records committed since we last looked (from the newest checkpoint, first)."""
        if not self._opened:
            self._opened = True
            self._load_checkpoint()
        # Sequence numbers are zero-padded, so the log's tail is every key after our head.
        after = layout.log_key(self.head) if self.head else ""
        for info in self.store.list(layout.LOG, start_after=after):
            name = info.key[len(layout.LOG) :]
            if not name.endswith(".json") or not name[:-5].isdigit():
                continue
            seq = int(name[:-5])
            if seq not in self._records and seq > self._base_seq:
                self._records[seq] = CommitRecord.from_json(self.store.get_bytes(info.key))
        return self.records

    def _load_checkpoint(self) -> None:
        # The pointer is a hint written after the checkpoint: stale or missing only means
        # more records to read, never a wrong state.
        try:
            seq = int(json.loads(self.store.get_bytes(layout.LAST_CHECKPOINT))["seq"])
            state = WarehouseState.from_json(self.store.get_bytes(layout.checkpoint_key(seq)))
        except (NotFound, KeyError, ValueError):
            return
        self._base = state
        self._state = state.copy()

    @property
    def _base_seq(self) -> int:
        return self._base.seq if self._base is not None else 0

    @property
    def records(self) -> list[CommitRecord]:
        """The records read since the base checkpoint, in sequence order."""
        return [self._records[s] for s in sorted(self._records)]

    def record(self, seq: int) -> CommitRecord:
        """Commit `seq`'s record, from the log itself where it predates the base checkpoint."""
        if seq in self._records:
            return self._records[seq]
        return CommitRecord.from_json(self.store.get_bytes(layout.log_key(seq)))

    @property
    def head(self) -> int:
        return max(self._records, default=self._base_seq)

    @property
    def state(self) -> WarehouseState:
        """The log folded up to `head` (incrementally: each record is applied once)."""
        if self._state.seq < self.head:
            for seq in sorted(s for s in self._records if s > self._state.seq):
                self._state.apply(self._records[seq])
        return self._state

    def done_objects(self) -> dict[str, str]:
        return dict(self.state.done)

    def files(self, table: str) -> list[str]:
        """The live files of a table (what the snapshot lists), in commit order."""
        return self.state.files(table)

    def versions(self) -> set[str]:
        """Every liger_version the committed runs hold."""
        return set(self.state.versions)

    def digests(self) -> set[str]:
        """Every protocol, environment and descriptor digest already written."""
        return set(self.state.digests)

    def replayed_files(self) -> set[str]:
        """Quarantine files whose open rows a replay settled."""
        return set(self.state.replayed)

    def batch_of(self) -> dict[str, str]:
        """The batch that added each live file (where staging keeps it until published)."""
        return {k: f.batch for k, f in self.state.live().items()}

    def read_table(self, table: str, columns: list[str] | None = None) -> pa.Table | None:
        """All committed rows of a table (published or still in staging)."""
        parts = [
            self.read_file(f.batch, f.key, columns)
            for f in self.state.tables.get(table, {}).values()
        ]
        if not parts:
            return None
        return pa.concat_tables(parts, promote_options="permissive")

    def read_file(self, batch: str, key: str, columns: list[str] | None = None) -> pa.Table:
        """One committed Parquet file, wherever the commit protocol has it right now."""
        # Final key, staging, then the final key again: a publish running elsewhere copies
        # before it deletes, so a file missing from both of the first two looks has landed at
        # its final key by the third. On S3 the whole file is read into memory: fine for the
        # small per-batch files the warehouse holds, not meant for multi-GB tables.
        for candidate in (key, layout.staging_key(batch, key), key):
            path = self.store.local_path(candidate)
            try:
                if path is not None:
                    return millisecond_timestamps(pq.read_table(path, columns=columns))
                with self.store.open_read(candidate) as fh:
                    table = pq.read_table(pa.py_buffer(fh.read()), columns=columns)
                return millisecond_timestamps(table)
            except (NotFound, FileNotFoundError):
                continue
        raise NotFound(key)

    # -- writing ----------------------------------------------------------------------------

    def stage(self, batch: str, key: str, path: Path) -> None:
        """Hand a finished local file to the store under the batch's staging folder."""
        self.store.move_file(layout.staging_key(batch, key), path)

    def commit(self, record: CommitRecord) -> int:
        """Append a record at the next sequence number; PreconditionFailed if someone was first."""
        seq = self.head + 1
        record = record.model_copy(
            update={"seq": seq, "committed_at": utcnow(), "writer": _writer_id()}
        )
        payload = record.to_json()
        try:
            self.store.put_bytes(layout.log_key(seq), payload, if_none_match=True)
        except StorageError:
            # The PUT may have succeeded with its reply lost: the SDK's retry then meets our own
            # record (412), or the retries ran out. Read the record back: it is ours (these
            # exact bytes: our writer id and commit time) or it is not, and only then do we know.
            if not self._is_ours(seq, payload):
                raise
        self._records[seq] = record
        return seq

    def _is_ours(self, seq: int, payload: bytes) -> bool:
        try:
            return self.store.get_bytes(layout.log_key(seq)) == payload
        except NotFound:
            return False

    def publish(self, record: CommitRecord) -> None:
        """Move a committed batch's staged files to their final keys (idempotent)."""
        batch = record.batch
        for i, entry in enumerate(record.files):
            staged = layout.staging_key(batch, entry.key)
            if self.store.head(staged) is not None:
                # A published file is never replaced: readers of Parquet fetch byte ranges, and
                # a second writer's copy of this batch (the loser of a commit race on the same
                # batch id re-staging it) has the same rows but not always the same bytes.
                if self.store.head(entry.key) is None:
                    try:
                        self.store.copy(staged, entry.key)
                    except NotFound:
                        # Another writer publishes this batch too (its recover, or that loser).
                        # It copies before it deletes, so the file is at its final key already.
                        if self.store.head(entry.key) is None:
                            raise
                self.store.delete(staged)
            elif self.store.head(entry.key) is None:
                # Neither staged nor published: the staging was removed under a live writer
                # (an orphan grace shorter than a batch). Say so rather than commit a hole.
                raise StorageError(
                    f"committed file {entry.key} of batch {batch} is neither staged nor published; "
                    "is KINDEX_ORPHAN_GRACE_S shorter than an ingest?"
                )
            if i == 0:
                fault_point("mid_publish")

    def _staged_batches(self) -> dict[str, list[Any]]:
        staged: dict[str, list[Any]] = {}
        for info in self.store.list(layout.STAGING):
            batch = info.key[len(layout.STAGING) :].split("/", 1)[0]
            staged.setdefault(batch, []).append(info)
        return staged

    def update_snapshot(self) -> None:
        """Advance `_kindex/snapshot.json` to the log head, unless a newer writer did already.

        Every committed batch up to the head that still has staged files is published first
        (another writer may have crashed mid-publish): the snapshot never lists a file that is
        not at its final key.
        """
        rolled = False
        for _ in range(20):
            current = self.store.head(layout.SNAPSHOT)
            if current is not None:
                snap = json.loads(self.store.get_bytes(layout.SNAPSHOT))
                if snap.get("seq", 0) >= self.head:
                    self.publish_delta()
                    return
            if not rolled:
                staged = self._staged_batches()
                for record in self._committed(staged).values():
                    self.publish(record)
                rolled = True
            payload = json.dumps(
                {"seq": self.head, "updatedAt": utcnow(), "tables": self.state.snapshot_tables()},
                indent=1,
                sort_keys=True,
            ).encode()
            try:
                if current is None:
                    self.store.put_bytes(layout.SNAPSHOT, payload, if_none_match=True)
                else:
                    self.store.put_bytes(layout.SNAPSHOT, payload, if_match=current.etag)
            except PreconditionFailed:
                continue
            self.publish_delta()
            self.maybe_checkpoint()
            return

    def publish_delta(self) -> None:
        """Publish the log's head to the tables' Delta logs (`load.delta`): what readers read.

        Called once the head's files are all at their final keys; a no-op when the Delta
        tables are current. A crash part way leaves some tables at the head and the rest one
        state behind, every one readable; the next call (any command's recover) completes it.
        """
        published = delta.published_seq(self.store)
        state = self.state
        if published >= self.head or state.seq != self.head:
            return
        objects = {
            o.key: o.etag
            for r in self.records
            if (r.seq or 0) > published
            for o in r.objects
            if o.status == "ingested"
        }
        delta.publish(self.store, state, objects=objects, between=_delta_fault_point)

    def _committed(self, batches: Iterable[str]) -> dict[str, CommitRecord]:
        """Those of `batches` that are committed, each as a record to publish.

        A batch older than the base checkpoint is rebuilt from the state (its files, live or
        retired); the records read since then are used as they are.
        """
        wanted = set(batches)
        if not wanted:
            return {}
        kept = self.state.committed_batches()
        kept_keys = {k for keys in kept.values() for k in keys}
        committed = {
            # A file a later commit retired and a vacuum deleted is gone for good: not a hole.
            r.batch: r.model_copy(update={"files": [f for f in r.files if f.key in kept_keys]})
            for r in self.records
            if r.batch in wanted
        }
        for batch, keys in kept.items():
            if batch in wanted and batch not in committed:
                files = [FileEntry(key=k, rows=0) for k in keys]
                committed[batch] = CommitRecord(batch=batch, files=files)
        return committed

    def run_index(self) -> tuple[pa.Table, list[str]] | None:
        """The run index kept beside the base checkpoint, and the live run files it lacks.

        A writer needs every committed run's key (`stored_index` columns) to tell re-delivered
        rows from new ones. Taken from the run files, that is a read of every run ever
        committed; with this, a start-up reads one compact file plus the run files committed
        since the checkpoint. None: no usable index (no checkpoint, none written beside it, or
        a rebuild since, which drops runs): read every run file. Files compacted since the
        checkpoint hold runs the index has: their keys repeat with the same fingerprints, and
        the run index treats a repeated key with the same fingerprint as one run.
        """
        if self._base is None or any(r.rebuild for r in self.records):
            return None
        try:
            index = pq.read_table(
                pa.py_buffer(self.store.get_bytes(layout.run_index_key(self._base_seq)))
            )
        except (NotFound, pa.ArrowInvalid, OSError):
            return None
        live = self.state.tables.get(layout.RUNS, {})
        since = [
            f.key
            for r in self.records
            for f in r.files
            if f.key in live and layout.table_of(f.key) == layout.RUNS
        ]
        return index, since

    def _write_run_index(self, seq: int) -> None:
        """Keep every run's key beside the checkpoint at `seq` (a function of the log at `seq`:
        any writer may write it, and identical content may be written twice)."""
        from kindex_etl.normalize.columnar import STORED_KEY_COLUMNS, merge_indexes, stored_index

        kept = self.run_index()
        if kept is None:
            # File by file: every run's key columns read at once (two 71-character digests a
            # run) peaked at ~3 GiB over 4.4M runs in the first checkpoint after a backfill.
            parts = [
                stored_index(self.read_file(f.batch, f.key, STORED_KEY_COLUMNS))
                for f in self.state.tables.get(layout.RUNS, {}).values()
            ]
            if not parts:
                return
            # One dictionary of series ids, as one read would give (a quarter smaller on disk).
            index = pa.concat_tables(parts).unify_dictionaries().combine_chunks()
        else:
            # The previous index and what was committed since: the cost of a checkpoint does
            # not grow with the warehouse's history, only with its index's size.
            base, since = kept
            batch_of = self.batch_of()
            index = merge_indexes(
                [base]
                + [stored_index(self.read_file(batch_of[k], k, STORED_KEY_COLUMNS)) for k in since]
            )
        sink = pa.BufferOutputStream()
        pq.write_table(index, sink, compression="zstd")
        self.store.put_bytes(layout.run_index_key(seq), sink.getvalue().to_pybytes())

    def _drop_old_run_indexes(self, keep_from: int) -> None:
        """Only start-ups read run indexes, and only the newest: older ones are dead weight
        (one that a start-up is reading right now just sends it back to the run files)."""
        for info in list(self.store.list(layout.CHECKPOINTS)):
            name = info.key[len(layout.CHECKPOINTS) :]
            if name.endswith(".runs.parquet") and int(name.split(".", 1)[0]) < keep_from:
                with contextlib.suppress(NotFound):
                    self.store.delete(info.key)

    def maybe_checkpoint(self, interval: int | None = None) -> int | None:
        """Write a checkpoint at the head when the last one is `interval` commits behind.

        The state at a sequence number is a function of the log, so any writer may write it:
        a conditional create, and losing to someone else's identical bytes is fine.
        """
        if interval is None:
            from kindex_etl.config import settings

            interval = settings().checkpoint_interval
        head = self.head
        previous = self._latest_checkpoint()
        if interval <= 0 or head == 0 or head - previous < interval:
            return None
        state = self.state
        if state.seq != head:  # a gap in what we read: leave the checkpoint to a later writer
            return None
        # The run index first: a checkpoint is only ever pointed at with its index in place.
        self._write_run_index(head)
        with contextlib.suppress(PreconditionFailed):
            self.store.put_bytes(layout.checkpoint_key(head), state.to_json(), if_none_match=True)
        fault_point("after_checkpoint")
        self.store.put_bytes(layout.LAST_CHECKPOINT, json.dumps({"seq": head}).encode())
        self._drop_old_run_indexes(keep_from=previous)
        return head

    def _latest_checkpoint(self) -> int:
        try:
            return int(json.loads(self.store.get_bytes(layout.LAST_CHECKPOINT))["seq"])
        except (NotFound, KeyError, ValueError):
            return 0

    def drop_staging(self, batch: str) -> None:
        """Delete the staging of a batch that will not be committed (a no-op reprocess)."""
        for info in list(self.store.list(f"{layout.STAGING}{batch}/")):
            self.store.delete(info.key)

    def discard(self, batch: str) -> None:
        """Drop the staging of a batch whose commit just lost (PreconditionFailed); refreshes.

        Batch ids are deterministic (base sequence + sources), so two writers that ingest the
        same objects from the same base stage the *same* batch id, and the winner's commit
        record then names staged files that the loser also wrote. Those are the winner's now:
        they are published, never deleted. The same holds when our own commit succeeded but its
        reply was lost and a retry answered 412. Staging is deleted only when the sequence
        number we tried is visibly taken by another batch (then this id can never commit);
        otherwise (e.g. S3's 409 for a still-running concurrent conditional write) it is left
        for `recover`: rolled forward if committed, removed as an orphan after the grace.
        """
        attempted = self.head + 1
        self.refresh()
        committed = self._committed([batch])
        if batch in committed:
            self.publish(committed[batch])
            return
        if attempted not in self._records:
            return
        for info in list(self.store.list(f"{layout.STAGING}{batch}/")):
            self.store.delete(info.key)

    def settled(self) -> bool:
        """Nothing for `recover` to finish: no staged file, and the snapshot at the log's head.

        Reads only (a listing and the snapshot), so a command can ask before it decides to start
        any work at all."""
        if next(iter(self.store.list(layout.STAGING)), None) is not None:
            return False
        if self.store.head(layout.SNAPSHOT) is None:
            return self.head <= 0
        return int(json.loads(self.store.get_bytes(layout.SNAPSHOT)).get("seq", 0)) >= self.head

    def recover(self, orphan_grace: timedelta) -> dict[str, int]:
        """Finish interrupted publishes; remove staging that no commit will ever claim."""
        self.refresh()
        staged_batches = self._staged_batches()
        committed = self._committed(staged_batches)
        rolled, removed = 0, 0
        now = datetime.now(UTC)
        for batch, infos in staged_batches.items():
            if batch in committed:
                self.publish(committed[batch])
                rolled += 1
            elif all(now - i.last_modified >= orphan_grace for i in infos):
                for info in infos:
                    self.store.delete(info.key)
                removed += 1
        self.update_snapshot()
        return {"rolled_forward": rolled, "orphans_removed": removed}


def _delta_fault_point(table: str) -> None:
    if table == layout.PROTOCOLS:
        fault_point("mid_delta")


def _writer_id() -> Writer:
    return Writer(host=socket.gethostname(), pid=os.getpid(), attempt=secrets.token_hex(8))
