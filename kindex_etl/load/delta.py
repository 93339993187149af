"""Every table published as a Delta Lake table: what readers read.

The kindex log (`_kindex/log/`) stays the writers' commit: one record covers every table of a
batch at once and names the upstream object versions it consumed, which no single Delta commit
can. Readers, though, get no protocol of ours: after each commit the tables' live files (the
log folded, `WarehouseState.tables`) are published to each table's `_delta_log` as add and
remove actions, by delta-rs, over the same Parquet files (no data is rewritten), each add with
the file's statistics from its footer (`file_stats`), so readers skip files by them. Any engine
with a Delta reader (DuckDB `delta_scan`, Polars `scan_delta`, pandas and pyarrow through
`deltalake`, Spark, Trino) then sees exactly the committed rows, before, during and after a
compaction or a vacuum, where a Parquet glob counts compacted rows twice until the vacuum.
Those two are delta-rs's own, run on these tables and then recorded in the kindex log
(`kindex_etl.maintenance`): the one writer of a Delta log besides this publish.

Order gives readers referential integrity: dimension tables first, the runs after them, the
analysis's tables last; so a reader who reads the runs first never meets a digest that the
dimension tables it reads next lack. Each Delta commit carries the kindex log sequence number
it publishes as the `txn` of application `kindex-log`: a publisher that finds a table at that
number or past it leaves it alone, so two writers publishing at once, or a crash half way
through and the next run's publish, converge without double entries. The runs table's commit
also names each upstream object version it brought (`kindex-object:<sha256 of key and ETag>`),
a ledger that any Delta reader can query with `DeltaTable.transaction_version`.

The quarantine's Delta table holds the rows held back *now*: files whose rows a replay
settled are removed from it (the kindex log keeps the history).

JSON documents are not Parquet, so they cannot be a Delta table themselves: the table
`document_files` lists the live document files (table, path, rows), published last. A reader
of documents reads that list and then only those files. It is one file, replaced when the
listing changes; the vacuum deletes the replaced ones as it does every table's.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from kindex_etl.contracts import tables
from kindex_etl.load import layout
from kindex_etl.load.file_stats import INDEXED_COLUMNS, file_stats, stats_columns
from kindex_etl.load.state import LiveFile, WarehouseState
from kindex_etl.storage import LocalStore, ObjectStore, StorageError

LOG_APP = "kindex-log"
OBJECT_APP = "kindex-object:"
DOCUMENT_FILES = "document_files"
# Marker of the newest log sequence number every table was published at: a cheap "nothing to
# do" for the (frequent) calls that find the Delta tables current.
PUBLISHED = layout.CONTROL + "delta.json"
# Dimension tables first, runs after them, the analysis's tables (which name runs) last.
# The quarantine after the runs: a replay moves rows from it into the runs, and a reader
# between the two publishes sees them in both, never in neither (nothing refers to it).
PUBLISH_ORDER = (
    layout.PROTOCOLS,
    layout.ENVIRONMENTS,
    layout.WORKLOADS,
    layout.IMPLEMENTATIONS,
    layout.RUNS,
    layout.QUARANTINE,
    layout.REGRESSIONS,
    layout.TRIAGE,
)
PARTITION_COLUMN = "release"
DOCUMENT_FILES_SCHEMA = pa.schema(
    [("table", pa.string()), ("path", pa.string()), ("rows", pa.int64())]
)
COMMIT_ATTEMPTS = 10
# Every open of a table (each publish opens each one) replays its log from the newest Delta
# checkpoint: at delta-rs's default of one per 100 commits, the publish of an hourly ingest took
# 0.04 s after one commit and 0.2 s after twenty. A checkpoint every 10 commits bounds it.
# Log entries older than the vacuum's retention name files that may be gone: the daily upkeep
# drops them then (delta-rs's default keeps 30 days: ~6,500 log files per table at hourly).
TABLE_CONFIGURATION = {
    "delta.checkpointInterval": "10",
    "delta.logRetentionDuration": "interval 7 days",
}
# The columns every add action carries min/max and null counts for (`file_stats`): set once per
# table, at its creation or its first publish after, and never changed (a column added to it
# later would be one the files before have no bounds for).
STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def schemas() -> dict[str, pa.Schema]:
    """Each table's schema as the contract has it now (`_schema_of` makes it Delta's)."""
    return {
        DOCUMENT_FILES: DOCUMENT_FILES_SCHEMA,
        layout.RUNS: tables.RUN_SCHEMA,
        layout.PROTOCOLS: tables.PROTOCOL_SCHEMA,
        layout.ENVIRONMENTS: tables.ENVIRONMENT_SCHEMA,
        layout.WORKLOADS: tables.WORKLOAD_SCHEMA,
        layout.IMPLEMENTATIONS: tables.IMPLEMENTATION_SCHEMA,
        layout.QUARANTINE: tables.QUARANTINE_SCHEMA,
        layout.REGRESSIONS: tables.REGRESSIONS_SCHEMA,
        layout.TRIAGE: tables.TRIAGE_SCHEMA,
    }


def published_files(state: WarehouseState, table: str) -> dict[str, LiveFile]:
    """The files of `table` its Delta log lists once `state` is published."""
    files = state.tables.get(table, {})
    if table == layout.QUARANTINE:
        # Readers get what is held back now: a file whose rows a replay settled is out
        # (its rows are runs, or held back again in the replay's own file).
        return {k: f for k, f in files.items() if k not in state.replayed}
    return dict(files)


def object_app_id(key: str, etag: str) -> str:
    """The Delta `txn` application id of one upstream object version (no path in it: keys
    are upstream's data, and app ids are printed by every Delta tool)."""
    return OBJECT_APP + hashlib.sha256(f"{key}\n{etag}".encode()).hexdigest()[:32]


def table_uri(store: ObjectStore, table: str) -> str:
    if isinstance(store, LocalStore):
        return str(store.root / table)
    return f"{store.url.rstrip('/')}/{table}"


def storage_options(store: ObjectStore) -> dict[str, str] | None:
    """delta-rs's options for the store, resolved by boto3 as every other S3 call of ours is.

    delta-rs has its own credential chain, which knows no AWS profile (`AWS_PROFILE`,
    `~/.aws/credentials`) and probes the instance metadata address where boto3 would not: a
    warehouse boto3 writes could not be published. So boto3's resolved credentials (fresh per
    call: session tokens expire), region and endpoint are handed over. These options hold a
    secret: never log them (delta-rs's errors do not echo them; tested).
    """
    if not store.url.startswith("s3://"):
        return None
    import boto3

    options: dict[str, str] = {}
    credentials = boto3.session.Session().get_credentials()
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        options["AWS_ACCESS_KEY_ID"] = frozen.access_key
        options["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
        if frozen.token:
            options["AWS_SESSION_TOKEN"] = frozen.token
    # Attributes, not isinstance: a store may be wrapped (fault injection, tests' interleaving)
    # and an endpoint left out would send delta-rs to AWS while boto3 writes elsewhere.
    region: str | None = getattr(store, "region", None)
    if region:
        options["AWS_REGION"] = region
    endpoint: str | None = getattr(store, "endpoint_url", None)
    if endpoint and not endpoint.endswith(".amazonaws.com"):
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    return options


def open_table(
    store: ObjectStore, table: str, options: dict[str, str] | None = None
) -> DeltaTable | None:
    """A table as readers see it, or None before its first publish."""
    if options is None:
        options = storage_options(store)
    try:
        return DeltaTable(table_uri(store, table), storage_options=options)
    except TableNotFoundError:
        return None


def _schema_of(table: str, store: ObjectStore, files: Iterable[LiveFile]) -> pa.Schema:
    """The Delta schema: the contract's where there is one, else the newest file's footer.

    Partition columns are part of a Delta schema but not of the files (the path holds them).
    """
    schema = schemas().get(table)
    if schema is None:
        if not files:
            raise StorageError(f"no schema for table {table}: not in the contract, no file yet")
        newest = list(files)[-1]
        with store.open_read(newest.key) as fh:
            schema = pq.read_schema(pa.py_buffer(fh.read()))
    schema = pa.schema([pa.field(f.name, _delta_type(f.type)) for f in schema])
    if table == layout.RUNS:
        schema = schema.append(pa.field(PARTITION_COLUMN, pa.string()))
    return schema


def _delta_type(type_: pa.DataType) -> pa.DataType:
    # Delta has one timestamp type (microseconds, UTC); the files' milliseconds read back as it.
    if pa.types.is_timestamp(type_):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_dictionary(type_):
        return type_.value_type
    return type_


def _partition(table: str, key: str) -> dict[str, str | None]:
    if table != layout.RUNS:
        return {}
    release = layout.release_of(key)
    if release is None:
        raise StorageError(f"runs file outside a release partition: {key}")
    return {PARTITION_COLUMN: release}


def warehouse_key(table: str, path: str) -> str:
    """The object key of a path delta-rs reports (its add actions, its vacuum's deletions).

    delta-rs reports a path escaped; its log (and our actions) hold the object's own name: its
    compaction writes release `0.8.0+cu121` into a folder `release=0.8.0%2Bcu121`, which it
    logs as that and reports as `release=0.8.0%252Bcu121`."""
    return f"{table}/{unquote(path)}"


def table_files(dt: DeltaTable, table: str) -> dict[str, int]:
    """The files a Delta table lists, by warehouse key, and their rows."""
    adds = dt.get_add_actions(flatten=True)
    paths, rows = adds.column("path").to_pylist(), adds.column("num_records").to_pylist()
    return {warehouse_key(table, p): int(n or 0) for p, n in zip(paths, rows, strict=True)}


def _add(store: ObjectStore, table: str, f: LiveFile, columns: list[str]) -> AddAction:
    info = store.head(f.key)
    if info is None:
        raise StorageError(f"committed file {f.key} is not at its final key: cannot publish it")
    return AddAction(
        path=f.key[len(table) + 1 :],  # as delta-rs has it: the object's own name
        size=info.size,
        partition_values=_partition(table, f.key),
        modification_time=int(info.last_modified.timestamp() * 1000),
        data_change=True,
        # numRecords, min, max and null counts from the file's footer: readers skip by them.
        stats=json.dumps(file_stats(store, f.key, info.size, columns), separators=(",", ":")),
    )


def _remove(table: str, key: str, now_ms: int) -> RemoveAction:
    return RemoveAction(
        path=key[len(table) + 1 :],
        data_change=True,
        deletion_timestamp=now_ms,
        partition_values=_partition(table, key),
    )


@dataclass
class PublishResult:
    seq: int
    tables: dict[str, tuple[int, int]] = field(default_factory=dict)  # added, removed


def published_seq(store: ObjectStore) -> int:
    from kindex_etl.storage import NotFound

    try:
        return int(json.loads(store.get_bytes(PUBLISHED))["seq"])
    except (NotFound, KeyError, ValueError):
        return 0


def publish(
    store: ObjectStore,
    state: WarehouseState,
    *,
    objects: Mapping[str, str] | None = None,
    between: Callable[[str], None] | None = None,
) -> PublishResult | None:
    """Bring every table's Delta log to `state` (the log folded at `state.seq`).

    `objects` (key -> ETag): the upstream object versions the newest commit brought, recorded
    in the runs table's commit. `between(table)` runs after each table (crash tests). Returns
    None when the tables were already at `state.seq` or past it.
    """
    seq = state.seq
    published = published_seq(store)
    if seq <= 0 or published >= seq:
        return None
    options = storage_options(store)  # resolved once: a publish opens every table twice
    result = PublishResult(seq)
    for table in PUBLISH_ORDER if published == 0 else ():
        # Every table of the contract exists (empty) before any is published: a publish that
        # stops part way on a new warehouse leaves readers empty tables, not missing ones.
        if open_table(store, table, options) is None:
            _create(store, table, {}, [], options)
    for table in (*PUBLISH_ORDER, *sorted(set(state.tables) - set(PUBLISH_ORDER))):
        if table.startswith("documents/"):
            continue
        files = published_files(state, table)
        if not files and table not in PUBLISH_ORDER:
            continue  # a table of newer code, emptied: its schema is only in its files
        txns = [Transaction(LOG_APP, seq)]
        if table == layout.RUNS and objects:
            txns += [Transaction(object_app_id(k, e), 1) for k, e in sorted(objects.items())]
        counts = _publish_table(store, table, files, txns, options)
        if counts is not None:
            result.tables[table] = counts
        if between is not None:
            between(table)
    documents = [
        {"table": t.removeprefix("documents/"), "path": f.key, "rows": f.rows}
        for t, files in sorted(state.tables.items())
        if t.startswith("documents/")
        for f in files.values()
    ]
    _publish_documents(store, documents, seq, options)
    store.put_bytes(PUBLISHED, json.dumps({"seq": seq}).encode())
    return result


def _publish_table(
    store: ObjectStore,
    table: str,
    files: Mapping[str, LiveFile],
    txns: list[Transaction],
    options: dict[str, str] | None = None,
) -> tuple[int, int] | None:
    seq = txns[0].version
    last: Exception | None = None
    if options is None:
        options = storage_options(store)
    for _attempt in range(COMMIT_ATTEMPTS):
        dt = open_table(store, table, options)
        if dt is None:
            if not _create(store, table, files, txns, options):
                continue  # another publisher created it first: diff against theirs
            return len(files), 0
        if (dt.transaction_version(LOG_APP) or 0) >= seq:
            return None
        try:
            _evolve(dt, _schema_of(table, store, files.values()) if files else None)
            columns = _stats_columns(dt, table)
        except (CommitFailedError, DeltaError):
            continue  # another publisher added the same columns (or properties) first
        current = table_files(dt, table)
        now_ms = int(time.time() * 1000)
        actions: list[AddAction | RemoveAction] = [
            _add(store, table, f, columns) for key, f in files.items() if key not in current
        ]
        added = len(actions)
        gone = sorted(set(current) - set(files))
        actions += [_remove(table, key, now_ms) for key in gone]
        try:
            dt.create_write_transaction(
                actions,
                mode="append",
                schema=dt.schema(),
                partition_by=dt.metadata().partition_columns or None,
                # No rebase onto a newer table version: the diff above was taken against this
                # one, and a publisher of a newer log state may have moved the table since
                # (retired files this diff would add back). Lose, re-read, diff again.
                commit_properties=CommitProperties(app_transactions=txns, max_commit_retries=0),
            )
        except (CommitFailedError, DeltaError) as exc:
            last = exc
            continue  # another publisher moved the table: re-read it and diff again
        return added, len(actions) - added
    raise StorageError(
        f"gave up publishing {table} after {COMMIT_ATTEMPTS} Delta commit attempts: {_plain(last)}"
    )


def _create(
    store: ObjectStore,
    table: str,
    files: Mapping[str, LiveFile],
    txns: list[Transaction],
    options: dict[str, str] | None,
) -> bool:
    """Create the table holding `files`; False when another publisher created it first."""
    columns = _wanted_stats_columns(table)
    configuration = dict(TABLE_CONFIGURATION)
    if columns:
        configuration[STATS_COLUMNS] = ",".join(columns)
    try:
        create_table_with_add_actions(
            table_uri(store, table),
            Schema.from_arrow(_schema_of(table, store, files.values())),
            [_add(store, table, f, columns) for f in files.values()],
            mode="error",
            partition_by=[PARTITION_COLUMN] if table == layout.RUNS else None,
            name=table.replace("/", "_"),
            configuration=configuration,
            storage_options=options,
            commit_properties=CommitProperties(app_transactions=txns),
        )
    except (DeltaError, CommitFailedError):
        if open_table(store, table, options) is None:
            raise
        return False
    return True


def _wanted_stats_columns(table: str) -> list[str]:
    """The stats columns of a table of the contract (`file_stats.stats_columns`); none for
    one of newer code, whose files then carry their row count alone."""
    schema = schemas().get(table)
    return stats_columns(schema) if schema is not None else []


def _stats_columns(dt: DeltaTable, table: str) -> list[str]:
    """The table's stats columns; a table made before they existed gets them now (its files
    from then on carry bounds, the older ones their row count alone: readers take both)."""
    configured = dt.metadata().configuration.get(STATS_COLUMNS)
    if configured is not None:
        return [c for c in configured.split(",") if c]
    # Of the table's own first 32 columns (where delta-rs's compactions put bounds), should the
    # contract have reordered them since.
    first = {f.name for f in dt.schema().fields[:INDEXED_COLUMNS]}
    columns = [c for c in _wanted_stats_columns(table) if c in first]
    if columns:
        dt.alter.set_table_properties(
            {STATS_COLUMNS: ",".join(columns)},
            commit_properties=CommitProperties(max_commit_retries=0),
        )
    return columns


def _plain(exc: Exception | None) -> str:
    """delta-rs's error text without its terminal colour codes, on one line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc or "no error recorded"))
    return " ".join(text.split())[:300]


def _evolve(dt: DeltaTable, schema: pa.Schema | None) -> None:
    """Columns new to the contract are added to the Delta schema (as nullable: older files
    read them as null); nothing is ever dropped or retyped."""
    if schema is None:
        return
    from deltalake import Field

    have = {f.name for f in dt.schema().fields}
    missing = [f for f in schema if f.name not in have]
    if missing:
        new = Schema.from_arrow(pa.schema(missing))
        dt.alter.add_columns([Field(f.name, f.type, nullable=True) for f in new.fields])


def _publish_documents(
    store: ObjectStore,
    documents: list[dict[str, object]],
    seq: int,
    options: dict[str, str] | None,
) -> None:
    """The listing as one small file per log state (`part-<seq>.parquet`: the same name from
    any publisher, so a retried publish rewrites identical content), replacing the last; or,
    when the live file lists the same (a vacuum's or a replay's commit changes no document),
    that file again, so that the table gains no file the next vacuum would leave behind."""
    listing = _same_listing(store, documents, options)
    if listing is None:
        key = f"{DOCUMENT_FILES}/part-{seq:012d}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(documents, schema=DOCUMENT_FILES_SCHEMA), sink)
        store.put_bytes(key, sink.getvalue().to_pybytes())
        listing = {key: LiveFile(key, len(documents), "")}
    _publish_table(store, DOCUMENT_FILES, listing, [Transaction(LOG_APP, seq)], options)


def _same_listing(
    store: ObjectStore, documents: list[dict[str, object]], options: dict[str, str] | None
) -> dict[str, LiveFile] | None:
    """The live listing file when it lists exactly `documents`, else None."""
    dt = open_table(store, DOCUMENT_FILES, options)
    live = table_files(dt, DOCUMENT_FILES) if dt is not None else {}
    if dt is None or len(live) != 1 or next(iter(live.values())) != len(documents):
        return None
    listed = dt.to_pyarrow_dataset().to_table().to_pylist()
    order = lambda d: (str(d["table"]), str(d["path"]))  # noqa: E731
    if sorted(listed, key=order) != sorted(documents, key=order):
        return None
    key = next(iter(live))
    return {key: LiveFile(key, len(documents), "")}


def maintain_logs(store: ObjectStore) -> dict[str, int]:
    """Delta's own log upkeep, daily after the vacuum (which vacuums `document_files` with the
    rest): a checkpoint per table and expired log entries dropped."""
    done: dict[str, int] = {}
    options = storage_options(store)
    for table in (*PUBLISH_ORDER, DOCUMENT_FILES):
        dt = open_table(store, table, options)
        if dt is None:
            continue
        dt.create_checkpoint()
        dt.cleanup_metadata()
        done[table] = dt.version()
    return done
