"""Write changes through the warehouse's commit protocol (the only module that touches it).

Stage `regressions/part-<batch>.parquet` and `documents/regressions/part-<batch>.jsonl.zst`,
commit one record (its files, no upstream objects), publish, advance the snapshot:
the same steps, guarantees and recovery as an ingest batch. A lost commit race re-reads the
log and recomputes what is new.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..load import layout
from ..load.record import CommitRecord, FileEntry
from ..load.warehouse import Warehouse
from ..scratch import ScratchDir
from ..storage import ObjectStore, PreconditionFailed, StorageError
from .schema import REGRESSIONS_SCHEMA, RETRACTED, change_document
from .series import version_order
from .spill import RUN_ID_FIELDS

ATTEMPTS = 5
DOCUMENTS = f"documents/{layout.REGRESSIONS}"
STAGE_CHUNK = 4096  # rows made whole (run ids attached) and written at a time
Attach = Callable[[Sequence[dict[str, Any]]], Iterator[dict[str, Any]]]


def _whole(rows: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return iter(rows)


@dataclass(frozen=True)
class Known:
    """A change's latest committed row, as much of it as deciding needs."""

    state: str
    series_key: str
    after_release: str
    # (warehouse_seq, written_seq): the highest is current. Without written_seq, ties (two
    # analyses of one snapshot, run at once, that disagree) went to the later file and row,
    # which delta-rs's compaction (newest commit first) reversed.
    rank: tuple[int, int]
    batch: str  # where the whole row is
    key: str

    @property
    def seq(self) -> int:
        """The row's warehouse_seq: the snapshot its analysis read."""
        return self.rank[0]


@dataclass(frozen=True)
class Scope:
    """What an analysis looked at: the series it analysed (None: the whole warehouse, so a
    change of a series that no longer exists is gone too) and its `since` floor."""

    series: frozenset[str] | None = None
    since: str | None = None

    def covers(self, known: Known) -> bool:
        if self.series is not None and known.series_key not in self.series:
            return False
        return self.since is None or version_order(known.after_release) >= version_order(self.since)


def _seq(value: int | None) -> int:
    """A row's warehouse_seq or written_seq; a row without one (written before the column
    existed) comes first."""
    return -1 if value is None else int(value)


def _rank(warehouse_seq: int | None, written_seq: int | None) -> tuple[int, int]:
    """Which of a change's rows is current: the highest rank (docs/tables.md)."""
    return _seq(warehouse_seq), _seq(written_seq)


def _rank_of(row: dict[str, Any]) -> tuple[int, int]:
    return _rank(row["warehouse_seq"], row.get("written_seq"))


def known_changes(warehouse: Warehouse) -> dict[str, Known]:
    """change_id -> its latest committed row."""
    # By rank, as readers decide (docs/tables.md), not by file order: a compaction merges
    # files. Equal ranks (rows written before written_seq existed) go to the later file and
    # row, as before.
    latest: dict[str, Known] = {}
    columns = ["change_id", "state", "series_key", "after_release", "warehouse_seq", "written_seq"]
    for f in warehouse.state.tables.get(layout.REGRESSIONS, {}).values():
        table = read_columns(warehouse, f.batch, f.key, columns)
        for cid, state, series, after, seq, written in zip(
            *(table.column(c).to_pylist() for c in columns), strict=True
        ):
            held = latest.get(cid)
            rank = _rank(seq, written)
            if held is None or rank >= held.rank:
                latest[cid] = Known(state, series, after, rank, f.batch, f.key)
    return latest


def read_columns(warehouse: Warehouse, batch: str, key: str, columns: list[str]) -> pa.Table:
    """`columns` of a regressions file; those added since the file was written, as nulls.

    Only such an older file is read whole (run ids included), to be conformed."""
    try:
        return warehouse.read_file(batch, key, columns)
    except pa.ArrowInvalid:
        return conformed(warehouse.read_file(batch, key)).select(columns)


# What `controls.step_of` reads of a change, and what says which row is its latest.
_STEP_COLUMNS = [
    "change_id", "warehouse_seq", "written_seq", "state", "kernel", "series_key", "series_class",
    "metric", "direction", "origin", "gpu_product", "gpu_form_factor", "software_class",
    "after_commit", "after_release",
    # Whether a moved count could change the row's state (`controls.unsettled`: a baseline's
    # could not), and its series' bucket fields, to analyse it again where it could.
    "provider", "workload_digest",
    # A shared step's class and each kernel's step in it (`rules.judge_shared_step`).
    "operation_mode", "ratio", "before_value", "before_position", "after_position",
]  # fmt: skip


def current_steps(store: ObjectStore) -> list[dict[str, Any]]:
    """The step columns (`_STEP_COLUMNS`) of the latest row of every change, retracted ones
    aside: what an hourly analysis counts at a step that many kernels share beside its own
    changes (`controls.mark_shared_steps`), and what it counted before (`controls.unsettled`)."""
    warehouse = Warehouse(store)
    warehouse.refresh()
    # The step's columns alone: the run ids are most of a row.
    return [r for r in latest_rows(warehouse, _STEP_COLUMNS) if r["state"] != RETRACTED]


def announced_alerts(store: ObjectStore) -> frozenset[str]:
    """The changes whose current row is an `alert`: announced, and not taken back."""
    warehouse = Warehouse(store)
    warehouse.refresh()
    return frozenset(cid for cid, state in known_states(warehouse).items() if state == "alert")


def known_states(warehouse: Warehouse) -> dict[str, str]:
    """change_id -> its latest committed state."""
    return {cid: k.state for cid, k in known_changes(warehouse).items()}


def retractions(
    warehouse: Warehouse,
    known: dict[str, Known],
    found: Sequence[dict[str, Any]],
    scope: Scope,
    analysed_seq: int,
) -> list[dict[str, Any]]:
    """The changes an analysis no longer finds, inside what it looked at, as rows of state
    `retracted` (their last row otherwise unchanged, run ids included).

    Without them the table kept every change an earlier analysis reported for ever: after a
    detector revision (this project's issue 30 took 154 alerts on upstream's history down to 7),
    a reprocess, or more runs at the same commits, a reader taking each change's latest row
    went on seeing alerts that no analysis stands behind any more."""
    seen = {r["change_id"] for r in found}
    by_series: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        by_series.setdefault(r["series_key"], []).append(r)
    # A row written by an analysis of a later commit than this one's is not this analysis's
    # to judge: it saw runs this one did not (a full analysis outlived by an hourly one).
    gone = {
        cid
        for cid, k in known.items()
        if k.state != RETRACTED and cid not in seen and scope.covers(k) and k.seq <= analysed_seq
    }
    if not gone:
        return []
    rows: list[dict[str, Any]] = []
    files = sorted({(known[cid].batch, known[cid].key) for cid in gone})
    for batch, key in files:
        wanted = {cid for cid in gone if (known[cid].batch, known[cid].key) == (batch, key)}
        table = conformed(warehouse.read_file(batch, key))
        picked = table.filter(pc.is_in(table.column("change_id"), pa.array(sorted(wanted))))
        last: dict[str, dict[str, Any]] = {}
        for row in picked.to_pylist():
            if _rank_of(row) == known[row["change_id"]].rank:
                last[row["change_id"]] = row  # the current row (equal ranks: the later)
        for row in last.values():
            why = _why_retracted(row, by_series.get(row["series_key"], ()), analysed_seq)
            rows.append({**row, "state": RETRACTED, "retracted_state": row["state"],
                         "evidence": why})  # fmt: skip
    rows.sort(key=lambda r: r["change_id"])
    return rows


def _why_retracted(row: dict[str, Any], now: Sequence[dict[str, Any]], seq: int) -> str:
    """Every retraction says why: where its series' step is now, or that it holds none."""
    moved = [r for r in now if r["direction"] == row["direction"]]
    if moved:
        at = moved[0].get("after_commit") or moved[0].get("after_release")
        why = f"the points since place this step at {at} (change {moved[0]['change_id']})"
    else:
        why = "its series holds no such step any more (the points since did not keep it)"
    held = f"; it had been: {row['evidence']}" if row.get("evidence") else ""
    return f"retracted by the analysis of warehouse commit {seq}: {why}{held}"


def conformed(table: pa.Table) -> pa.Table:
    """A regressions file in today's schema: files written before a column existed have it
    as nulls (a retraction repeats such a file's row)."""
    for f in REGRESSIONS_SCHEMA:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(REGRESSIONS_SCHEMA.names)


def new_rows(
    warehouse: Warehouse, rows: Sequence[dict[str, Any]], scope: Scope, analysed_seq: int
) -> list[dict[str, Any]]:
    """The rows whose (change, state) the table does not hold as current, then the
    retractions of what the analysis no longer finds within `scope`. Changes whose current row
    an analysis of a later commit wrote are left to it."""
    known = known_changes(warehouse)
    changed = [
        r
        for r in rows
        if (k := known.get(r["change_id"])) is None
        or (k.state != r["state"] and k.seq <= analysed_seq)
    ]
    return [*changed, *retractions(warehouse, known, rows, scope, analysed_seq)]


def commit_changes(
    store: ObjectStore,
    rows: list[dict[str, Any]],
    *,
    analysed_seq: int,
    attach: Attach = _whole,
    scope: Scope | None = None,
) -> tuple[int | None, list[dict[str, Any]]]:
    """Commit the rows whose (change, state) is new and the retractions of changes the
    analysis no longer finds within `scope` (default: the whole warehouse); returns (commit
    seq or None, those rows).

    `attach`: gives rows back whole, where `rows` leave out their run-id lists
    (`Analysis.full_changes`); the files are written from it a chunk at a time.
    """
    warehouse = Warehouse(store)
    looked_at = scope or Scope()
    for _ in range(ATTEMPTS):
        warehouse.refresh()
        # The commit below gets the next sequence number, or fails and this is redone.
        written = warehouse.head + 1
        new = [
            {**r, "warehouse_seq": analysed_seq, "written_seq": written}
            for r in new_rows(warehouse, rows, looked_at, analysed_seq)
        ]
        if not new:
            return None, []
        digest = hashlib.sha256(
            json.dumps(
                [warehouse.head, analysed_seq, sorted(r["change_id"] + r["state"] for r in new)]
            ).encode()
        ).hexdigest()[:16]
        batch = f"r{digest}"
        # A record with files and no upstream objects: ingests read none of it as "done", and
        # the regressions table's rows say which commit they analysed (`warehouse_seq`).
        record = CommitRecord(
            batch=batch, files=_stage(warehouse, batch, new, _keeping_whole(attach))
        )
        try:
            seq = warehouse.commit(record)
        except PreconditionFailed:
            warehouse.discard(batch)
            continue
        assert seq == written, (seq, written)  # the rows say which commit wrote them
        warehouse.publish(warehouse.records[-1])
        warehouse.update_snapshot()
        return seq, new
    raise StorageError(f"gave up after {ATTEMPTS} commit conflicts on {store.url}")


def _keeping_whole(attach: Attach) -> Attach:
    """`attach`, passing rows that already hold their run ids (retractions) through as they
    are: the analysis's spill knows only the changes it found."""

    def whole(rows: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        attached = attach([r for r in rows if RUN_ID_FIELDS[0] not in r])
        for row in rows:
            yield row if RUN_ID_FIELDS[0] in row else next(attached)

    return whole


def _stage(
    warehouse: Warehouse, batch: str, rows: list[dict[str, Any]], attach: Attach
) -> list[FileEntry]:
    with ScratchDir.create(batch) as tmp:
        parquet = Path(tmp, "changes.parquet")
        docs = Path(tmp, "changes.jsonl.zst")
        with (
            pq.ParquetWriter(parquet, REGRESSIONS_SCHEMA, compression="zstd") as table_out,
            pa.CompressedOutputStream(str(docs), "zstd") as docs_out,
        ):
            for start in range(0, len(rows), STAGE_CHUNK):
                whole = list(attach(rows[start : start + STAGE_CHUNK]))
                table_out.write_table(pa.Table.from_pylist(whole, schema=REGRESSIONS_SCHEMA))
                docs_out.write(_jsonl(whole, change_document))
        keys = [
            (layout.table_key(layout.REGRESSIONS, batch), parquet),
            (f"{DOCUMENTS}/part-{batch}.jsonl.zst", docs),
        ]
        for key, path in keys:
            warehouse.stage(batch, key, path)
    return [FileEntry(key=key, rows=len(rows)) for key, _ in keys]


def _jsonl(rows: list[dict[str, Any]], doc: Callable[[dict[str, Any]], dict[str, Any]]) -> bytes:
    return "".join(
        json.dumps(doc(r), sort_keys=True, separators=(",", ":")) + "\n" for r in rows
    ).encode()


def latest_rows(warehouse: Warehouse, columns: Sequence[str]) -> list[dict[str, Any]]:
    """`columns` of every change's latest row (retracted ones included): what
    `current_steps` counts and `kindex-etl regressions --show` lists without analysing."""
    wanted = list(dict.fromkeys(["change_id", "warehouse_seq", "written_seq", *columns]))
    latest: dict[str, dict[str, Any]] = {}
    for f in warehouse.state.tables.get(layout.REGRESSIONS, {}).values():
        for row in read_columns(warehouse, f.batch, f.key, wanted).to_pylist():
            held = latest.get(row["change_id"])
            if held is None or _rank_of(row) >= _rank_of(held):
                latest[row["change_id"]] = row
    return list(latest.values())
