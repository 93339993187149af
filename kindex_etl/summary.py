"""What an ingest reports: per upstream object, and for the whole run (`--json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ObjectReport:
    key: str
    etag: str
    rows: int = 0
    size: int = 0
    runs: int = 0
    duplicates: int = 0
    quarantined: int = 0
    status: str = "ingested"  # ingested | rejected | replayed | would-ingest
    detail: str = ""


@dataclass
class IngestSummary:
    upstream: str
    warehouse: str
    objects_seen: int = 0
    objects_ingested: int = 0
    objects_skipped: int = 0
    objects_rejected: int = 0
    rows_read: int = 0
    runs_written: int = 0
    duplicate_rows: int = 0
    quarantined_rows: int = 0
    quarantined_by_reason: dict[str, int] = field(default_factory=dict)
    new_versions: list[str] = field(default_factory=list)
    reruns_triggered: list[dict[str, Any]] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)
    recovered: dict[str, int] = field(default_factory=dict)
    objects: list[ObjectReport] = field(default_factory=list)
    elapsed_s: float = 0.0

    def as_dict(self, *, objects: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not objects:
            out.pop("objects")
        return out
