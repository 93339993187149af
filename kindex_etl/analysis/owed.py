"""An analysis owed: ingest commits that no finished analysis has looked through.

A stop (Ctrl-C, SIGTERM, a kill) after an ingest's commit and before its chained analysis
finished used to lose that analysis for good: the same command again found nothing new
upstream and said "nothing to do" (issue 54). What is owed is derived, not stored: every
analysis that finishes (changes committed, report written) records the commit it read through
(`analysed.json`, written last, see `run.run_regressions`), and an analysis is owed while a
later commit is an ingest that added runs. The ingest's own commit record is the durable mark,
written atomically with the batch, on a local folder and on S3 alike; there is no second file
to keep in step, and nothing to clear: the next finished analysis moves `analysed.json` past it.

No `analysed.json` (a warehouse only ever loaded with `--no-regressions`, one older than the
record, or one whose first analysis was stopped): owed as soon as there are runs, and the
analysis that pays it is a full one, which writes the record.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..load.layout import RUNS
from ..load.record import INGEST, CommitRecord
from ..load.warehouse import Warehouse
from ..storage import NotFound, ObjectStore
from .analysed import analysed_through


@dataclass(frozen=True)
class Owed:
    """`after_seq`: where the owed analysis starts (the record; None: every series, in full);
    `newest`: the newest ingest commit it must look at."""

    after_seq: int | None
    newest: int

    def describe(self) -> str:
        since = "" if self.after_seq is None else f" since commit {self.after_seq}"
        return f"the analysis of the ingests{since} (through commit {self.newest}) is owed"


def _adds_runs(record: CommitRecord) -> bool:
    # Compaction rewrites runs without changing one, and the analysis's own commits (the
    # regressions and triage tables) add none: only an ingest's runs are news to an analysis.
    return record.kind == INGEST and any(f.key.startswith(RUNS + "/") for f in record.files)


def owed_analysis(store: ObjectStore) -> Owed | None:
    """What analysis is owed on this warehouse, or None. Reads `analysed.json` and the commit
    records after it (newest first, stopping at the first ingest): a few small reads."""
    warehouse = Warehouse(store)
    warehouse.refresh()
    through = analysed_through(store)
    if through is None:
        return Owed(after_seq=None, newest=warehouse.head) if warehouse.files(RUNS) else None
    for seq in range(warehouse.head, through, -1):
        try:
            record = warehouse.record(seq)
        except NotFound:
            # A record the log no longer holds: what it did cannot be told, so look again at
            # everything (the analysis then records a newer commit, and this is not met twice).
            return Owed(after_seq=None, newest=warehouse.head)
        if _adds_runs(record):
            return Owed(after_seq=through, newest=seq)
    return None
