"""What a flow run shows in Prefect's UI: a table per upstream object and a markdown summary."""

from __future__ import annotations

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from kindex_etl.ingestion.results import IngestSummary, markdown_summary, object_rows


def publish_artifacts(summary: IngestSummary, *, label: str) -> None:
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
