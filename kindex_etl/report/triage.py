"""Verdicts people give changes: the `triage` table, written through the warehouse's commit path.

One row per verdict, appended, never rewritten: a change's verdict is its newest row. Staged as
`triage/part-<batch>.parquet`, committed as one record with no upstream objects, published and
snapshotted, like `analysis.publish` commits the regressions table; a lost commit race retries.
Only this module writes the table, so moving it to another table format touches this file.

`invalid` verdicts on alerts are what the measured false-alarm rate counts: of the alerts a
person looked at, the share that were wrong.
"""

from __future__ import annotations

import getpass
import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..contracts.tables import TRIAGE_SCHEMA
from ..load import layout
from ..load.record import CommitRecord, FileEntry
from ..load.warehouse import Warehouse
from ..scratch import ScratchDir
from ..storage import ObjectStore, PreconditionFailed, StorageError

VERDICTS = ("acknowledged", "expected", "invalid")
ATTEMPTS = 5


class TriageError(ValueError):
    """A verdict that cannot be recorded (unknown or ambiguous change, unknown verdict)."""


def resolve_change(warehouse: Warehouse, change_id: str) -> tuple[str, str]:
    """(full change id, its latest state) for an id or a unique prefix of one (with or
    without `sha256:`, at least 8 hex digits)."""
    from ..analysis.publish import known_states

    states = known_states(warehouse)
    if change_id in states:
        return change_id, states[change_id]
    bare = change_id.removeprefix("sha256:").lower()
    if len(bare) < 8:
        raise TriageError(f"change id {change_id!r}: give at least 8 hex digits")
    found = [c for c in states if c.removeprefix("sha256:").startswith(bare)]
    if not found:
        raise TriageError(f"no change {change_id!r} in the regressions table")
    if len(found) > 1:
        raise TriageError(f"change id {change_id!r} is ambiguous: {len(found)} changes match")
    return found[0], states[found[0]]


def record_verdict(
    store: ObjectStore,
    change_id: str,
    verdict: str,
    *,
    note: str = "",
    author: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Commit one verdict on a change; returns the row written (with `seq`, the commit)."""
    if verdict not in VERDICTS:
        raise TriageError(f"verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")
    warehouse = Warehouse(store)
    when = now or datetime.now(UTC)
    who = author if author is not None else _user()
    for _ in range(ATTEMPTS):
        warehouse.refresh()
        full, state = resolve_change(warehouse, change_id)
        verdict_id = hashlib.sha256(f"{full}|{verdict}|{note}|{who}|{when.isoformat()}".encode())
        row = {
            "verdict_id": "sha256:" + verdict_id.hexdigest(),
            "change_id": full,
            "change_state": state,
            "verdict": verdict,
            "note": note,
            "author": who,
            "recorded_at": when,
        }
        batch = "t" + verdict_id.hexdigest()[:16]
        record = CommitRecord(batch=batch, files=[_stage(warehouse, batch, row)])
        try:
            seq = warehouse.commit(record)
        except PreconditionFailed:
            warehouse.discard(batch)
            continue
        warehouse.publish(warehouse.records[-1])
        warehouse.update_snapshot()
        return {**row, "recorded_at": when.isoformat(timespec="milliseconds"), "seq": seq}
    raise StorageError(f"gave up after {ATTEMPTS} commit conflicts on {store.url}")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def _stage(warehouse: Warehouse, batch: str, row: dict[str, Any]) -> FileEntry:
    key = layout.table_key(layout.TRIAGE, batch)
    with ScratchDir.create(batch) as tmp:
        path = Path(tmp, "triage.parquet")
        pq.write_table(pa.Table.from_pylist([row], schema=TRIAGE_SCHEMA), path)
        warehouse.stage(batch, key, path)
    return FileEntry(key=key, rows=1)


_EPOCH = datetime.min.replace(tzinfo=UTC)  # a row without a time: before any with one


def read_verdicts(store: ObjectStore) -> dict[str, dict[str, Any]]:
    """change_id -> its newest verdict row (an empty dict where nobody gave one)."""
    warehouse = Warehouse(store)
    warehouse.refresh()
    latest: dict[str, dict[str, Any]] = {}
    order: dict[str, tuple[datetime, int, int]] = {}
    # The latest `recorded_at` wins, as a Delta reader can order them (the daily compaction,
    # delta-rs's, writes a file's rows newest commit first); a tie, to the later file and row.
    for i, f in enumerate(warehouse.state.tables.get(layout.TRIAGE, {}).values()):
        for j, r in enumerate(warehouse.read_file(f.batch, f.key).to_pylist()):
            at = (r["recorded_at"] or _EPOCH, i, j)
            if r["change_id"] in order and order[r["change_id"]] > at:
                continue
            order[r["change_id"]] = at
            latest[r["change_id"]] = {
                **r,
                "state": r["verdict"],
                "recorded_at": r["recorded_at"].isoformat() if r["recorded_at"] else "",
            }
    return latest


@dataclass(frozen=True)
class FalseAlarms:
    """Of the alerts people gave a verdict, how many were `invalid`."""

    label: str
    invalid: int
    triaged: int

    @property
    def rate(self) -> float | None:
        return self.invalid / self.triaged if self.triaged else None

    def interval(self) -> tuple[float, float] | None:
        """Wilson's 95 % interval for the rate (sound at the small counts triage gives)."""
        n = self.triaged
        if not n:
            return None
        z = 1.959963984540054
        p = self.invalid / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)


def measured_false_alarms(
    changes: Iterable[Mapping[str, Any]], verdicts: Mapping[str, Mapping[str, Any]]
) -> list[FalseAlarms]:
    """Over the alerts of this analysis that have a verdict: all of them, then per metric/pass
    (the detector's series class)."""
    counts: dict[str, list[int]] = {}
    for c in changes:
        if c.get("state") != "alert":
            continue
        v = verdicts.get(str(c.get("change_id")))
        if not v:
            continue
        bad = int(v.get("state") == "invalid")
        for label in ("all alerts", str(c.get("series_class") or "?")):
            got = counts.setdefault(label, [0, 0])
            got[0] += bad
            got[1] += 1
    ordered = sorted(counts, key=lambda k: (k != "all alerts", k))
    return [FalseAlarms(k, counts[k][0], counts[k][1]) for k in ordered]
