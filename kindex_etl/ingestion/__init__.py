"""The ingest stage: plan the objects, process each commit batch, commit it, report."""

from kindex_etl.ingestion.commit import BatchOutcome
from kindex_etl.ingestion.replay import open_quarantine, replay
from kindex_etl.ingestion.results import IngestSummary, ObjectReport
from kindex_etl.ingestion.run import (
    IngestOptions,
    Plan,
    finish,
    idle_summary,
    ingest_batch,
    plan,
    recover,
    require_objects,
)

__all__ = [
    "BatchOutcome",
    "IngestOptions",
    "IngestSummary",
    "ObjectReport",
    "Plan",
    "finish",
    "idle_summary",
    "ingest_batch",
    "open_quarantine",
    "plan",
    "recover",
    "replay",
    "require_objects",
]
