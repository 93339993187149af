"""What a run tells its operators: Prefect artifacts and a console summary."""

from __future__ import annotations

from typing import Any

from .summary import IngestSummary


def object_rows(summary: IngestSummary) -> list[dict[str, Any]]:
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


def publish_artifacts(summary: IngestSummary, *, label: str) -> None:
    """A table artifact (per object) and a markdown summary on the current flow run."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    # Always both, so every run's page shows them (an empty table: no object was new).
    create_table_artifact(
        key=f"kindex-{label}-objects",
        table=object_rows(summary),
        description=f"kindex-etl {label}: per upstream object",
    )
    create_markdown_artifact(
        key=f"kindex-{label}-summary",
        markdown=markdown_summary(summary, label=label),
        description=f"kindex-etl {label} summary",
    )
