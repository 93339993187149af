"""How far the analyses have looked: `_kindex/analysed.json`, a warehouse commit through which
every ingest's series were analysed.

An hourly ingest's chained analysis looks at the series its own commits touched. Where an
earlier ingest died after its commit and before its analysis (or ran with `--no-regressions`),
nobody looked at that commit's series until the daily full analysis, up to a day later. Each
analysis that commits its findings now records the commit it read through, and the next
incremental one starts from there if that is earlier than its own ingest.

The record is a hint that can only make an analysis look at more: any value written is true
(the analysis that wrote it had looked at everything up to it), so concurrent writers may
overwrite each other in any order. No record (a warehouse older than it): each analysis starts
from its own ingest, as before, and only a full analysis writes the first one (an incremental
one cannot know what was looked at before its ingest).
"""

from __future__ import annotations

from ..load import layout
from ..storage import ObjectStore
from .marks import read_mark, write_mark

KEY = layout.CONTROL + "analysed.json"


def analysed_through(store: ObjectStore) -> int | None:
    """The commit through which every ingest was analysed; None where nothing says."""
    return read_mark(store, KEY)


def record_analysed(store: ObjectStore, seq: int) -> None:
    """Say that the ingests through `seq` were analysed (a plain put: see above)."""
    write_mark(store, KEY, seq)
