"""The commit record: what one commit (`_kindex/log/<seq>.json`) says, as a typed model.

Written once by the commit that creates it, read by every process that opens the warehouse:
which upstream object versions are done, which files the batch added to which table, which
releases and digests it brought, and its counts. Field names are the log's JSON keys.

One mechanism replaces files: a record's `files` join the snapshot and its `retires` leave it
(still readable by older snapshots until a `vacuum` record forgets them). A compaction's files
hold exactly the rows of those it retires; a reprocess retires every live file at once.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Record(BaseModel):
    # Records written by newer code may carry more: reading one must not fail.
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ObjectEntry(_Record):
    """One upstream object version this batch read (replayed held-back rows are not listed)."""

    key: str
    etag: str
    rows: int = 0
    runs: int = 0
    duplicates: int = 0
    quarantined: int = 0
    status: str = "ingested"  # ingested | rejected


class FileEntry(_Record):
    """One data file the batch adds, by its final key (staged under the batch until published)."""

    key: str
    rows: int


class Counts(_Record):
    rows: int = 0
    runs: int = 0
    duplicates: int = 0
    quarantined: int = 0
    quarantined_by_reason: dict[str, int] = Field(default_factory=dict)


class Writer(_Record):
    host: str
    pid: int
    # Random per commit attempt. A writer whose PUT reply was lost reads the record back and
    # takes it for its own only if the bytes match: two writers of one process committing the
    # same batch within the same millisecond wrote identical bytes without it, and the loser
    # took the winner's record for its own.
    attempt: str = ""


# What a record does, for people and for tools reading the log; the state never branches on it.
INGEST, COMPACT, VACUUM, REPROCESS = "ingest", "compact", "vacuum", "reprocess"
# Left out of the log's bytes when at their default, so ingest records read as they always did.
_OMIT_WHEN_EMPTY = ("kind", "retires", "vacuumed", "rebuild")


class CommitRecord(_Record):
    batch: str
    kind: str = INGEST
    objects: list[ObjectEntry] = Field(default_factory=list)
    files: list[FileEntry] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    digests: list[str] = Field(default_factory=list)
    counts: Counts = Field(default_factory=Counts)
    # Quarantine files whose open rows this batch replayed: they are no longer open.
    replayed_files: list[str] = Field(default_factory=list)
    # Files (final keys) this commit takes out of the snapshot; their objects stay until vacuum.
    retires: list[str] = Field(default_factory=list)
    # Retired files whose objects a vacuum deleted: no snapshot from now on can name them.
    vacuumed: list[str] = Field(default_factory=list)
    # The commit re-derived the whole warehouse (a reprocess, retiring every live file): its
    # versions and digests are the warehouse's from now on, not added to what was there.
    rebuild: bool = False
    # Set when the record is committed; None on a record not yet written.
    seq: int | None = None
    committed_at: str | None = Field(default=None, alias="committedAt")
    writer: Writer | None = None

    def to_json(self) -> bytes:
        """The log's bytes: sorted keys, one space of indent (what readers have always seen)."""
        import json

        data: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True)
        for name in _OMIT_WHEN_EMPTY:
            if data.get(name) in ([], INGEST, False):
                del data[name]
        return json.dumps(data, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> CommitRecord:
        return cls.model_validate_json(payload)
