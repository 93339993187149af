"""What an ingest reports: per upstream object and for the whole run (`--json`, artifacts)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ConfigDict

from kindex_etl.load.record import ObjectEntry


class ObjectReport(ObjectEntry):
    """An object's entry in the commit record, plus what only the run's report shows.

    `status` is also `replayed` (held-back rows run again) or `would-ingest` (a dry run).
    """

    model_config = ConfigDict(frozen=False)

    size: int = 0
    detail: str = ""

    def entry(self) -> ObjectEntry:
        return ObjectEntry.model_validate(self.model_dump(include=set(ObjectEntry.model_fields)))


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

    def add(self, reports: list[ObjectReport], reasons: dict[str, int]) -> None:
        """Count one batch's objects and held-back reasons into the run's totals."""
        for r in reports:
            self.objects.append(r)
            if r.status == "rejected":
                self.objects_rejected += 1
            elif r.status != "replayed":
                self.objects_ingested += 1
            self.rows_read += r.rows
            self.runs_written += r.runs
            self.duplicate_rows += r.duplicates
            self.quarantined_rows += r.quarantined
        for reason, n in reasons.items():
            self.quarantined_by_reason[reason] = self.quarantined_by_reason.get(reason, 0) + n

    def as_dict(self, *, objects: bool = False) -> dict[str, Any]:
        out = asdict(self)
        out["objects"] = [r.model_dump() for r in self.objects]
        if not objects:
            out.pop("objects")
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


def object_rows(summary: IngestSummary) -> list[dict[str, Any]]:
    """One row per upstream object, for a table artifact."""
    return [
        {
            "object": r.key,
            "etag": r.etag,
            "size": r.size,
            "status": r.status,
            "rows": r.rows,
            "runs": r.runs,
            "duplicates": r.duplicates,
            "quarantined": r.quarantined,
            "detail": r.detail,
        }
        for r in summary.objects
    ]


def markdown_summary(summary: IngestSummary, *, label: str) -> str:
    lines = [
        f"# kindex-etl {label}",
        "",
        f"- upstream: `{summary.upstream}`",
        f"- warehouse: `{summary.warehouse}`",
        f"- objects: {summary.objects_seen} seen, {summary.objects_ingested} ingested, "
        f"{summary.objects_skipped} skipped, {summary.objects_rejected} rejected",
        f"- rows: {summary.rows_read} read, {summary.runs_written} new runs, "
        f"{summary.duplicate_rows} duplicates, {summary.quarantined_rows} quarantined",
        f"- commits: {', '.join(map(str, summary.commits)) or 'none'}",
        f"- new liger versions: {', '.join(summary.new_versions) or 'none'}",
        "",
    ]
    planned = [r for r in summary.objects if r.status == "would-ingest"]
    if planned:
        lines[1:1] = [
            "",
            f"**Dry run**: nothing was changed; {len(planned)} object(s), "
            f"{sum(r.size for r in planned)} bytes would be ingested (see the objects table).",
        ]
    if summary.quarantined_by_reason:
        lines += ["## Quarantined rows by reason", "", "| reason | rows |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in sorted(summary.quarantined_by_reason.items())]
        lines.append("")
    lines += ["## GPU re-runs triggered", ""]
    if summary.reruns_triggered:
        lines += [
            f"- {r['version']}: {r.get('state', 'requested')} {r.get('flowRunId') or ''}".rstrip()
            for r in summary.reruns_triggered
        ]
    else:
        lines.append("none")
    return "\n".join(lines) + "\n"
