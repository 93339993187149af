"""Telling people: every committed alert (and the retraction of one) is announced, whatever
crashed, and the same announcement always has the same event id.

The regressions flow used to emit events for the rows its own analysis had just committed.
That lost them twice over. A detect task retried after its commit (the report failing to
write, say) found those rows already committed, so nothing was new and nobody was told. And a
process killed between the commit and the events left them untold for good, since the next
analysis saw nothing new either.

Announcements now come from the log, like an outbox. `_kindex/announced.json` names the
commit through which every regressions row has been announced. `pending` reads the rows of
each later commit that added some: analyses' commits, never a compaction's, whose rows are
old. It returns the events for those rows (`alert` rows, and `retracted` rows whose
`retracted_state` was `alert`). The caller emits them and then moves the mark with
`record_announced`. A crash in between means those events are announced again, so each event's
id is derived from (warehouse, commit, change, state): Prefect's server stores an event id
once and its triggers skip an id they have seen, so a repeat reaches nobody twice.

Rows committed by any command count, not only by the flow: `kindex-etl regressions`, the demo
and triage commit alerts too, and the next flow announces them. Where there is no mark yet (a
warehouse older than it), the flow sets it at the head before its analysis
(`start_announcing`): the history before is not announced again, and its own commit is after
the mark even if a retry of its analysis finds it committed.

The mark is a hint that any writer may overwrite, like `analysed.json`. A writer only ever
writes a commit it has announced through. A mark moved back by a slower writer means only
that some events are announced again, under the same ids.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..load import layout
from ..load.record import INGEST
from ..load.warehouse import Warehouse
from ..storage import NotFound, ObjectStore
from .alerts import EVENT, RETRACTED_EVENT, event
from .marks import read_mark, write_mark
from .publish import read_columns
from .schema import REGRESSIONS_SCHEMA, RETRACTED

KEY = layout.CONTROL + "announced.json"
# uuid5 names under this namespace are the events' ids: one announcement, one id, forever.
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://kernelindex.dev/kindex-etl/events")
# What an event says of a change: every column but the run-id lists (millions of ids on a
# large warehouse, and no event carries them).
_COLUMNS = [n for n in REGRESSIONS_SCHEMA.names if not n.endswith("_run_ids")]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Announcement:
    """The events still to be told (`emit_event` keyword arguments, ids included) and the
    commit the mark moves to once they are."""

    through: int
    events: list[dict[str, Any]] = field(default_factory=list)


def announced_through(store: ObjectStore) -> int | None:
    """The commit through which every regressions row was announced; None where nothing says."""
    return read_mark(store, KEY)


def record_announced(store: ObjectStore, seq: int) -> None:
    """Say that every row committed through `seq` was announced (a plain put: see above)."""
    write_mark(store, KEY, seq)


def start_announcing(store: ObjectStore) -> int:
    """The mark, set at the head where there is none yet (before the caller's analysis
    commits: its own rows are then after it, even when a retry finds them committed)."""
    told = announced_through(store)
    if told is None:
        warehouse = Warehouse(store)
        warehouse.refresh()
        told = warehouse.head
        record_announced(store, told)
    return told


def pending(store: ObjectStore) -> Announcement:
    """The announcements of every regressions row committed after the mark, in commit order
    (none where there is no mark: see `start_announcing`)."""
    warehouse = Warehouse(store)
    warehouse.refresh()
    head = warehouse.head
    told = announced_through(store)
    if told is None:
        told = head
    events: list[dict[str, Any]] = []
    for seq in range(told + 1, head + 1):
        record = warehouse.record(seq)
        if record.kind != INGEST:
            continue  # a compaction's or reprocess's files hold rows announced before
        for f in record.files:
            if not f.key.startswith(layout.REGRESSIONS + "/"):
                continue
            try:
                rows = read_columns(warehouse, record.batch, f.key, _COLUMNS)
            except NotFound:
                # Vacuumed: the mark was behind by more than the retention. Say so; the rows'
                # state is still in the table for anyone who looks.
                logger.warning("commit %d's %s is gone; its alerts were not announced", seq, f.key)
                continue
            events += _events(rows, store.url, seq, record.committed_at)
    return Announcement(head, events)


def _events(
    rows: pa.Table, warehouse: str, seq: int, committed_at: str | None
) -> list[dict[str, Any]]:
    state = rows.column("state")
    retracted_alert = pc.and_kleene(
        pc.equal(state, RETRACTED), pc.equal(rows.column("retracted_state"), "alert")
    )
    told = pc.or_kleene(pc.equal(state, "alert"), retracted_alert)
    when = {"occurred": datetime.fromisoformat(committed_at)} if committed_at else {}
    out = []
    for row in rows.filter(pc.fill_null(told, False)).to_pylist():
        name = EVENT if row["state"] == "alert" else RETRACTED_EVENT
        ident = uuid.uuid5(_NAMESPACE, f"{warehouse}\n{seq}\n{row['change_id']}\n{row['state']}")
        out.append(event(row, warehouse, name=name) | {"id": ident, **when})
    return out
