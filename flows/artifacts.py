"""What a flow run shows in Prefect's UI: a table per upstream object and a markdown summary.

Every call goes through `_sync` (Prefect's own `_sync=True` switch on its sync/async
functions): these are called from synchronous code, but inside the async ingest flow Prefect
would otherwise hand back a coroutine that nothing awaits, and the artifact would never be made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from uuid import UUID

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from kindex_etl.ingestion.progress import Event, Progress
from kindex_etl.ingestion.results import IngestSummary, markdown_summary, object_rows


def _sync(function: Callable[..., Any], **kwargs: Any) -> Any:
    """`function(**kwargs)`, its synchronous variant whatever flow runs it."""
    return function(**kwargs, _sync=True)


def progress_key(label: str) -> str:
    return f"kindex-{label}-progress"


class ProgressArtifact:
    """A progress artifact on the flow run's page, updated as each commit batch lands."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.id: UUID | None = None

    def __call__(self, event: Event, p: Progress) -> None:
        if event == "rows":
            return  # one API call per batch, not per CSV block
        percent = round(100.0 * p.batches_done / p.batches_total, 1) if p.batches_total else 100.0
        text = f"{self.label}: {p.describe()}"
        if self.id is None:
            # The sync variant returns the id, not a coroutine.
            self.id = cast(
                UUID,
                _sync(
                    create_progress_artifact,
                    progress=percent,
                    key=progress_key(self.label),
                    description=text,
                ),
            )
        else:
            _sync(update_progress_artifact, artifact_id=self.id, progress=percent, description=text)


def publish_artifacts(summary: IngestSummary, *, label: str) -> None:
    # Always both, so every run's page shows them (an empty table: no object was new).
    _sync(
        create_table_artifact,
        key=f"kindex-{label}-objects",
        table=object_rows(summary),
        description=f"kindex-etl {label}: per upstream object",
    )
    _sync(
        create_markdown_artifact,
        key=f"kindex-{label}-summary",
        markdown=markdown_summary(summary, label=label),
        description=f"kindex-etl {label} summary",
    )
