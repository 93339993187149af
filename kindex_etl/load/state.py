"""What the log says, folded: the state every process derives from the commit records.

`WarehouseState.apply` is the one definition of what a record changes: which files are live
(in the snapshot, by table, in commit order), which are retired but still kept for readers of
older snapshots, which upstream object versions are done, which releases and digests exist,
which quarantine files were replayed. A checkpoint (`_kindex/checkpoints/<seq>.json`) is this
state written down at one sequence number, so a process starts from the newest checkpoint and
reads only the records after it: start-up cost does not grow with the number of commits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kindex_etl.load import layout
from kindex_etl.load.record import CommitRecord

CHECKPOINT_FORMAT = 1


@dataclass(frozen=True)
class LiveFile:
    key: str
    rows: int
    batch: str  # the batch that added it: where staging keeps it until it is published


@dataclass(frozen=True)
class RetiredFile:
    key: str
    rows: int
    batch: str
    seq: int  # the commit that retired it
    at: str  # that commit's time: vacuum deletes the object once it is older than the retention


@dataclass
class WarehouseState:
    seq: int = 0
    tables: dict[str, dict[str, LiveFile]] = field(default_factory=dict)
    retired: dict[str, RetiredFile] = field(default_factory=dict)
    done: dict[str, str] = field(default_factory=dict)
    versions: set[str] = field(default_factory=set)
    digests: set[str] = field(default_factory=set)
    replayed: set[str] = field(default_factory=set)

    def apply(self, record: CommitRecord) -> None:
        """Fold one committed record (in sequence order) into the state."""
        seq = record.seq if record.seq is not None else self.seq + 1
        for key in record.retires:
            live = self.tables.get(layout.table_of(key), {}).pop(key, None)
            if live is not None:
                self.retired[key] = RetiredFile(
                    key, live.rows, live.batch, seq, record.committed_at or ""
                )
            # A retired quarantine file is no longer open or replayed: it is simply gone.
            self.replayed.discard(key)
        for f in record.files:
            self.tables.setdefault(layout.table_of(f.key), {})[f.key] = LiveFile(
                f.key, f.rows, record.batch
            )
        for obj in record.objects:
            self.done[obj.key] = obj.etag
        if record.rebuild:
            self.versions.clear()
            self.digests.clear()
        self.versions.update(record.versions)
        self.digests.update(record.digests)
        self.replayed.update(record.replayed_files)
        for key in record.vacuumed:
            self.retired.pop(key, None)
        self.seq = max(self.seq, seq)

    def files(self, table: str) -> list[str]:
        return list(self.tables.get(table, {}))

    def live(self) -> dict[str, LiveFile]:
        return {k: f for files in self.tables.values() for k, f in files.items()}

    def committed_batches(self) -> dict[str, list[str]]:
        """Each batch with files still kept (live or retired) and those files' keys."""
        out: dict[str, list[str]] = {}
        for f in self.live().values():
            out.setdefault(f.batch, []).append(f.key)
        for r in self.retired.values():
            out.setdefault(r.batch, []).append(r.key)
        return out

    def snapshot_tables(self) -> dict[str, list[str]]:
        return {t: list(files) for t, files in self.tables.items() if files}

    # -- checkpoints --------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """Deterministic bytes: two writers checkpointing one sequence number write the same."""
        data: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "seq": self.seq,
            "tables": {
                t: [[f.key, f.rows, f.batch] for f in files.values()]
                for t, files in sorted(self.tables.items())
            },
            "retired": [[r.key, r.rows, r.batch, r.seq, r.at] for r in self.retired.values()],
            "done": dict(sorted(self.done.items())),
            "versions": sorted(self.versions),
            "digests": sorted(self.digests),
            "replayed": sorted(self.replayed),
        }
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> WarehouseState:
        data = json.loads(payload)
        if data.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"unknown checkpoint format {data.get('format')!r}")
        return cls(
            seq=int(data["seq"]),
            tables={
                t: {k: LiveFile(k, int(rows), batch) for k, rows, batch in files}
                for t, files in data["tables"].items()
            },
            retired={
                k: RetiredFile(k, int(rows), batch, int(seq), at)
                for k, rows, batch, seq, at in data["retired"]
            },
            done=dict(data["done"]),
            versions=set(data["versions"]),
            digests=set(data["digests"]),
            replayed=set(data["replayed"]),
        )

    def copy(self) -> WarehouseState:
        return WarehouseState(
            seq=self.seq,
            tables={t: dict(files) for t, files in self.tables.items()},
            retired=dict(self.retired),
            done=dict(self.done),
            versions=set(self.versions),
            digests=set(self.digests),
            replayed=set(self.replayed),
        )
