"""The series key, and the runs table streamed one group of whole series at a time.

A series is one computation measured one way on one kind of machine: kernel, pass
(`operation_mode`), metric, provider, workload digest, protocol digest, GPU (product and form
factor) and the environment's software class. Runs of different series are never compared by
the detector. The key is `sha256:` + hex(sha256(RFC 8785 JSON of those nine fields, named as
in `SERIES_FIELDS`)), so anyone can recompute it from a run and its environment.

The runs are read the way a consumer reads them: the files `_kindex/snapshot.json` lists,
through the object store, with pyarrow. To scale with series and not with runs held in memory,
runs are first split into buckets by a hash of the fields a series' runs share
(`BUCKET_FIELDS`, so a series never spans buckets), spilled to Arrow IPC files, and analysed
bucket by bucket.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import rfc8785
from packaging.version import InvalidVersion, Version

from ..contracts.tables import millisecond_timestamps
from ..extract.history import History, default_history
from ..load.layout import release_of
from ..load.writers import groups_by_code
from ..scratch import ScratchDir
from ..storage import NotFound, ObjectStore

SERIES_FIELDS = (
    "kernel",
    "operation_mode",
    "metric",
    "provider",
    "workload_digest",
    "protocol_digest",
    "gpu_product",
    "gpu_form_factor",
    "software_class",
    "origin",
)

# Which software facts make a different kind of machine, and how much of each version counts:
# a new torch or triton minor, a CUDA major or another host CPU is another series; a driver or
# Python patch is not (it is the kind of drift a series is meant to show). Upstream rows record
# no software at all: their class is "upstream".
SOFTWARE_CLASS_FIELDS: Mapping[str, int | None] = {
    "torch": 2,
    "triton": 2,
    "cuda": 1,
    "hostCpu": None,
}
UPSTREAM_CLASS = "upstream"

RUN_COLUMNS = [
    "external_id",
    "status",
    "kernel",
    "operation_mode",
    "metric",
    "provider",
    "workload_digest",
    "workload_slug",
    "protocol_digest",
    "environment_digest",
    "gpu_name",
    "liger_version",
    "observed_at",
    "x_value",
    "value_median",
    "value_p20",
    "value_p80",
    "source_kernel",
    "origin",
    "commit_sha",
    "commit_position",
]
# The strings of RUN_COLUMNS that repeat from run to run (all but the run's own id): a full
# analysis reads them as dictionaries and splits and spills their indices, and a bucket's are
# decoded once, when it is read back. As strings they were 60 % of the bytes that the split
# copied, compressed, wrote and read again (612 bytes a run against 241 as read here).
REPEATING_COLUMNS = (
    "status", "kernel", "operation_mode", "metric", "provider", "workload_digest",
    "workload_slug", "protocol_digest", "environment_digest", "gpu_name", "liger_version",
    "x_value", "source_kernel", "origin", "commit_sha",
)  # fmt: skip
# Columns that warehouses written before them lack: read as nulls there.
_OPTIONAL = {
    "source_kernel": pa.string(),
    "origin": pa.string(),
    "commit_sha": pa.string(),
    "commit_position": pa.int64(),
}
SNAPSHOT = "_kindex/snapshot.json"
RUNS = "benchmark_runs"
ENVIRONMENTS = "execution_environments"
PROTOCOLS = "benchmark_protocols"
WORKLOADS = "workloads"
# Runs per bucket, at most (a power of 16 of buckets, up to 4,096): a bucket's analysis holds
# its runs about four times over (read, filtered, keyed, sorted), ~2 KiB a run; at 400,000
# a 5M-row warehouse's analysis peaked at 1.4 GiB (docs/performance.md, "The regressions
# step, stop 22").
BUCKET_ROWS = 100_000
# The runs' digests, ids and slugs repeat from run to run: LZ4 frames cut the spilled bytes
# (every run written once and read once) several times over for little CPU.
_SPILL_OPTIONS = ipc.IpcWriteOptions(compression="lz4")
_SEP, _NULL = "\x1f", "\x00"


def software_class(software: Mapping[str, Any] | str | None) -> str:
    """The software class of an environment's `spec.software` (a dict or its JSON text)."""
    facts = json.loads(software) if isinstance(software, str) else dict(software or {})
    kept: dict[str, str] = {}
    for name, parts in SOFTWARE_CLASS_FIELDS.items():
        value = facts.get(name)
        if value is None:
            continue
        kept[name] = _leading(str(value), parts)
    if not kept:
        return UPSTREAM_CLASS
    return ",".join(f"{k}={v}" for k, v in sorted(kept.items()))


def _leading(value: str, parts: int | None) -> str:
    if parts is None:
        return value
    try:
        release = Version(value).release
    except InvalidVersion:
        return value
    return ".".join(str(p) for p in release[:parts])


def series_key(fields: Mapping[str, Any]) -> str:
    """`sha256:` + hex digest of the RFC 8785 JSON of the nine series fields.

    Every field is a string or null and every name ASCII, where `json.dumps` with sorted keys,
    no spaces and raw non-ASCII writes exactly RFC 8785's bytes (tested against `rfc8785`),
    at a fraction of its cost per series.
    """
    body = {name: fields.get(name) for name in SERIES_FIELDS}
    if not all(v is None or isinstance(v, str) for v in body.values()):
        return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def version_order(version: str) -> tuple[int, Version | str]:
    """PEP 440 order; a string that is no version sorts after every version (never seen)."""
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def read_snapshot(store: ObjectStore) -> dict[str, Any]:
    """The published state `{"seq", "tables"}`; an empty warehouse before the first commit."""
    try:
        snap: dict[str, Any] = json.loads(store.get_bytes(SNAPSHOT))
    except (NotFound, FileNotFoundError):
        return {"seq": 0, "tables": {}}
    snap.setdefault("tables", {})
    return snap


def _parquet_source(store: ObjectStore, key: str) -> Path | pa.BufferReader:
    """A local object's path; on a bucket, the object's bytes (fetched whole)."""
    path = store.local_path(key)
    if path is not None:
        return path
    with store.open_read(key) as fh:
        return pa.BufferReader(fh.read())


def _present(names: list[str], columns: list[str] | None) -> list[str] | None:
    if columns is None:
        return None
    return [c for c in columns if c in names or c not in _OPTIONAL]


def _completed(table: pa.Table, columns: list[str] | None) -> pa.Table:
    """`table` with the optional columns it lacks as nulls, in `columns`' order, and its
    timestamps in the contract's unit (`millisecond_timestamps`)."""
    table = millisecond_timestamps(table)
    if columns is None:
        return table
    for c in columns:
        if c not in table.column_names:
            table = table.append_column(c, pa.nulls(table.num_rows, _OPTIONAL[c]))
    return table.select(columns)


def read_parquet(store: ObjectStore, key: str, columns: list[str] | None = None) -> pa.Table:
    source = pq.ParquetFile(_parquet_source(store, key))
    wanted = _present(source.schema_arrow.names, columns)
    return _completed(source.read(columns=wanted), columns)


def iter_parquet(
    store: ObjectStore,
    key: str,
    columns: list[str] | None = None,
    dictionaries: Iterable[str] = (),
) -> Iterator[pa.Table]:
    """A Parquet object's row groups, one table each, in order; `dictionaries`: string
    columns read as dictionary arrays."""
    source = pq.ParquetFile(_parquet_source(store, key), read_dictionary=list(dictionaries))
    wanted = _present(source.schema_arrow.names, columns)
    for i in range(source.num_row_groups):
        yield _completed(source.read_row_group(i, columns=wanted), columns)


# What every run of one series shares that a run's own columns say (the GPU and software
# class come from its environment, and one class spans environments): runs are bucketed by a
# hash of these. The workload digest alone made buckets as uneven as workloads are popular
# (742 workloads over 17.5M runs: the largest of 256 buckets held 287k runs, 4x the mean).
# Neither the provider nor the pass (and with it the protocol, a digest per pass): a step is
# judged against the other providers measured in the same runs, and a `full` step against the
# same provider's forward and backward (`detect._Controls`), so all of a workload's providers
# and passes are analysed in one bucket. With the pass a field, a warehouse of more than one
# bucket judged `full` without its passes: 4 of 16,889 changes over 4.4M runs had another
# state than one bucket's analysis gave them.
BUCKET_FIELDS = ("kernel", "metric", "workload_digest")


def bucket_name(fields: Iterable[str | None], digits: int) -> str:
    """The first `digits` hex digits of sha256 over a run's `BUCKET_FIELDS` values."""
    return _bucket_of(_joined(fields), digits)


def _joined(fields: Iterable[str | None]) -> str:
    """A run's `BUCKET_FIELDS` values as one string (as `Touched.groups` holds them)."""
    return _SEP.join(_NULL if v is None else v for v in fields)


def _bucket_of(joined: str, digits: int) -> str:
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:digits]


def _groups(table: pa.Table) -> tuple[list[list[str | None]], np.ndarray]:
    """The distinct `BUCKET_FIELDS` values of `table`'s rows, and each row's index into them.

    A row group holds a few thousand distinct groups at most: what is done per group (a hash,
    a lookup) is done once for each, not once per run."""
    fields = [_codes(table.column(f)) for f in BUCKET_FIELDS]
    key = np.zeros(table.num_rows, np.int64)
    size = 1
    for codes, values in fields:
        if size * len(values) >= 2**62:
            size, key = _renumbered(key)
        key, size = key * len(values) + codes, size * len(values)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    distinct = [[values[codes[row]] for codes, values in fields] for row in first]
    return distinct, inverse.reshape(-1)


def _split_by_group(table: pa.Table, digits: int) -> Iterator[tuple[str, pa.Table]]:
    """(bucket name, its rows in their order): runs of one series always share a bucket."""
    distinct, inverse = _groups(table)
    buckets = [bucket_name(group, digits) for group in distinct]
    names = sorted(set(buckets))
    code_of = {name: i for i, name in enumerate(names)}
    codes = np.array([code_of[b] for b in buckets], np.int64)[inverse]
    # One take into bucket order, then zero-copy slices: a take per bucket (256 of them per
    # row group) cost twice as much over 4.4M runs.
    groups = list(groups_by_code(codes))
    if not groups:
        return
    ordered = table.take(pa.array(np.concatenate([rows for _, rows in groups])))
    start = 0
    for code, rows in groups:
        yield names[code], ordered.slice(start, len(rows))
        start += len(rows)


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str | None]]:
    """A column as codes into its distinct values, the last of them null."""
    arr = column.combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    values = [*arr.dictionary.to_pylist(), None]
    codes = arr.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
    return codes.astype(np.int64, copy=False), values


def _renumbered(key: np.ndarray) -> tuple[int, np.ndarray]:
    distinct, inverse = np.unique(key, return_inverse=True)
    return len(distinct), inverse.reshape(-1).astype(np.int64, copy=False)


@dataclass(frozen=True)
class Machine:
    product: str | None
    form_factor: str | None
    software_class: str


def environment_classes(store: ObjectStore, snapshot: Mapping[str, Any]) -> dict[str, Machine]:
    """Environment digest -> (GPU product, form factor, software class)."""
    machines: dict[str, Machine] = {}
    for key in snapshot["tables"].get(ENVIRONMENTS, []):
        table = read_parquet(store, key, ["digest", "product", "form_factor", "software"])
        for row in table.to_pylist():
            machines[row["digest"]] = Machine(
                row["product"], row["form_factor"], software_class(row["software"])
            )
    return machines


def protocol_families(store: ObjectStore, snapshot: Mapping[str, Any]) -> dict[str, str]:
    """Protocol digest -> its documents' family (`liger_kernel_bench` for upstream's timer,
    `kindex_device_time` for our re-runs' device time): which calibration class a series is."""
    families: dict[str, str] = {}
    for key in snapshot["tables"].get(PROTOCOLS, []):
        table = read_parquet(store, key, ["digest", "document"])
        for digest, document in zip(
            table.column("digest").to_pylist(), table.column("document").to_pylist(), strict=True
        ):
            spec = json.loads(document).get("spec", {})
            families[digest] = spec.get("comparability", {}).get("family", "")
    return families


def release_ranks(versions: set[str]) -> dict[str, int]:
    return {v: i for i, v in enumerate(sorted(versions, key=version_order))}


def with_series(
    runs: pa.Table,
    machines: Mapping[str, Machine],
    ranks: Mapping[str, int],
    history: History | None = None,
) -> pa.Table:
    """Passed runs with GPU product, form factor, software class, series key and their point.

    A series' points are upstream commits in history order where the run names its commit
    (`points`), else releases (PEP 440) as before: `release_rank` is the point's rank (equal
    ranks, one point), `commit_position` the commit's position per `history` (the stored one
    where the catalog does not know it), `harness_rev` the harness revision in force there and
    `segment_key` the part of the series between two harness revisions (the detector's unit).
    """
    hist = default_history() if history is None else history
    passed = pc.fill_null(
        pc.and_(
            pc.equal(runs.column("status"), "passed"), pc.is_valid(runs.column("value_median"))
        ),
        False,
    )
    if not pc.all(passed).as_py():  # a filter copies every column: most buckets need none
        runs = runs.filter(passed)
    digests = sorted(machines)
    index = pc.index_in(runs.column("environment_digest"), value_set=pa.array(digests, pa.string()))
    if index.null_count:
        # A run whose environment is not (yet) in the snapshot cannot be placed: leave it out
        # rather than put it in a series of unknown hardware.
        runs = runs.filter(pc.is_valid(index))
        index = index.filter(pc.is_valid(index))
    info = [machines[d] for d in digests]
    runs = runs.append_column(
        "gpu_product", pc.take(pa.array([m.product for m in info], pa.string()), index)
    )
    runs = runs.append_column(
        "gpu_form_factor", pc.take(pa.array([m.form_factor for m in info], pa.string()), index)
    )
    runs = runs.append_column(
        "software_class", pc.take(pa.array([m.software_class for m in info], pa.string()), index)
    )
    runs = points(runs, ranks, hist)
    # One key per distinct field combination (nulls kept as nulls: a GPU without a form factor
    # is a value, not a wildcard), mapped back onto the runs.
    joined = pc.binary_join_element_wise(
        *[runs.column(f) for f in SERIES_FIELDS],
        _SEP,
        null_handling="replace",
        null_replacement=_NULL,
    )
    combos = pc.unique(joined)
    keys = pa.array(
        [
            series_key(
                dict(
                    zip(
                        SERIES_FIELDS,
                        [None if v == _NULL else v for v in c.split(_SEP)],
                        strict=True,
                    )
                )
            )
            for c in combos.to_pylist()
        ],
        pa.string(),
    )
    runs = runs.append_column("series_key", pc.take(keys, pc.index_in(joined, value_set=combos)))
    runs = runs.append_column(
        "segment_key",
        pc.binary_join_element_wise(
            runs.column("series_key"), pc.fill_null(runs.column("harness_rev"), ""), "|"
        ),
    )
    # The run id last: runs measured at the same time keep one order whichever file (or
    # worker's spill) they came from.
    order = [
        ("series_key", "ascending"),
        ("release_rank", "ascending"),
        ("observed_at", "ascending"),
    ]
    if "external_id" in runs.column_names:
        order.append(("external_id", "ascending"))
    return runs.sort_by(order)


def points(runs: pa.Table, ranks: Mapping[str, int], history: History) -> pa.Table:
    """`release_rank` (the point's rank), resolved `commit_position` and `harness_rev`.

    Point order: the release label first (PEP 440; upstream's labels never go back along
    main), then the commit's position; a commit the history does not know comes after the
    known ones of its label, by the first time it was measured. Runs with no commit (the
    cumulative file's) are one point per release, as before commits were known.
    """
    n = runs.num_rows
    versions = sorted(ranks)
    vindex = pc.index_in(runs.column("liger_version"), value_set=pa.array(versions, pa.string()))
    vrank = pc.fill_null(
        pc.take(pa.array([ranks[v] for v in versions], pa.int64()), vindex), -1
    ).to_numpy(zero_copy_only=False)
    sha_enc = pc.dictionary_encode(runs.column("commit_sha")).combine_chunks()
    shas = sha_enc.dictionary.to_pylist()
    sha_code = pc.fill_null(sha_enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    known = [history.position(s) for s in shas]
    stored = runs.column("commit_position").to_numpy(zero_copy_only=False)
    stored = np.where(np.isnan(stored.astype(np.float64)), -1, stored).astype(np.int64)
    pos = np.where(
        sha_code >= 0,
        np.asarray([-1 if k is None else k for k in known] + [-1], np.int64)[sha_code],
        -1,
    )
    pos = np.where((pos < 0) & (sha_code >= 0), stored, pos)
    first_seen = np.zeros(n, np.int64)
    if (sha_code >= 0).any():
        seconds = pc.cast(
            pc.cast(runs.column("observed_at"), pa.timestamp("s", tz="UTC")), pa.int64()
        ).to_numpy(zero_copy_only=False)
        earliest = np.full(len(shas), np.iinfo(np.int64).max, np.int64)
        has = sha_code >= 0
        np.minimum.at(earliest, sha_code[has], seconds[has])
        first_seen = np.where(has, earliest[np.maximum(sha_code, 0)], 0)
    tier = np.where(sha_code < 0, 0, np.where(pos >= 0, 1, 2))
    value = np.where(tier == 1, pos, np.where(tier == 2, first_seen, 0))
    rank = _dense_rank(vrank, tier, value, sha_code)
    position = pa.array(np.where(pos >= 0, pos, 0), pa.int64(), mask=pos < 0)
    harness = pa.nulls(n, pa.string())
    if history.has_harness and n:
        # A revision splits only the providers whose timed code it changed (the catalog's
        # per-provider harness): one code per (kernel, provider).
        joined = pc.binary_join_element_wise(
            pc.fill_null(runs.column("source_kernel"), "\x00"),
            pc.fill_null(runs.column("provider"), "\x00"),
            "\x01",
        )
        kenc = pc.dictionary_encode(joined).combine_chunks()
        names = [tuple(n.split("\x01")) for n in kenc.dictionary.to_pylist()]
        kcode = pc.fill_null(kenc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        # One int64 per (kernel and provider, position): np.unique on a record array sorts
        # field by field in Python-level comparisons (a fifth of a full analysis' time).
        span = int(pos.max()) + 2
        pairs, where = np.unique((kcode + 1) * span + (pos + 1), return_inverse=True)

        def revision(k: int, p: int) -> str | None:
            kernel, provider = names[k] if k >= 0 else ("\x00", "\x00")
            return history.harness_revision(
                None if kernel == "\x00" else kernel,
                p if p >= 0 else None,
                None if provider == "\x00" else provider,
            )

        revs = [
            revision(k, p)
            for k, p in zip((pairs // span - 1).tolist(), (pairs % span - 1).tolist(), strict=True)
        ]
        harness = pa.array(revs, pa.string()).take(pa.array(where.reshape(-1)))
    out = runs.drop_columns(["commit_position"])
    return (
        out.append_column("commit_position", position)
        .append_column("release_rank", pa.array(rank.reshape(-1).astype(np.int32), pa.int32()))
        .append_column("harness_rev", pa.array(harness, pa.string()))
    )


def _dense_rank(*keys: np.ndarray) -> np.ndarray:
    """Each row's rank among the distinct tuples of `keys` (first key most significant)."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort(keys[::-1])
    new = np.zeros(n, bool)
    new[0] = True
    for key in keys:
        ordered = key[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    rank = np.empty(n, np.int64)
    rank[order] = np.cumsum(new) - 1
    return rank


@dataclass(frozen=True)
class Touched:
    """The series an ingest touched, as their `BUCKET_FIELDS` (joined as the buckets join
    them): every provider and pass of a touched workload comes along, for the controls."""

    groups: frozenset[str]
    kernels: frozenset[str]

    @property
    def workloads(self) -> set[str]:
        at = BUCKET_FIELDS.index("workload_digest")
        return {group.split(_SEP)[at] for group in self.groups}


def touched_by(rows: Sequence[Mapping[str, Any]], besides: Touched | None = None) -> Touched:
    """The series groups of change rows (their `BUCKET_FIELDS` columns) but those `besides`
    holds, as `Touched`."""
    skip = besides.groups if besides is not None else frozenset()
    groups: set[str] = set()
    kernels: set[str] = set()
    for r in rows:
        group = _joined(r.get(f) for f in BUCKET_FIELDS)
        if group not in skip:
            groups.add(group)
            kernels.add(r["kernel"])
    return Touched(frozenset(groups), frozenset(kernels))


# The most log records an hourly analysis reads from before the newest checkpoint; more (days
# of commits) and a full analysis is cheaper than reading them one object at a time.
CHECKPOINTED_RECORDS = 200


def touched_since(store: ObjectStore, after_seq: int) -> Touched | None:
    """The series whose runs files were committed by ingests after `after_seq`; None where the
    log no longer says (a record gone, a rebuild, a file gone): analyse everything."""
    from ..load.record import INGEST
    from ..load.warehouse import Warehouse

    warehouse = Warehouse(store)
    records = warehouse.refresh()
    first = records[0].seq if records and records[0].seq is not None else warehouse.head + 1
    if first - (after_seq + 1) > CHECKPOINTED_RECORDS:
        return None
    # A checkpoint after `after_seq` (the daily compaction writes one) folded the records in
    # between into its state, but they are still in the log: read them back from there.
    try:
        records = [warehouse.record(seq) for seq in range(after_seq + 1, first)] + records
    except NotFound:
        return None
    later = [r for r in records if r.seq is not None and r.seq > after_seq]
    if any(r.rebuild for r in later):
        return None
    keys = [f.key for r in later if r.kind == INGEST for f in r.files
            if f.key.startswith(RUNS + "/")]  # fmt: skip
    live = set(read_snapshot(store)["tables"].get(RUNS, []))
    if live <= set(keys):
        return None  # every run is new: that is the whole warehouse
    groups: set[str] = set()
    kernels: set[str] = set()
    try:
        for key in keys:
            table = read_parquet(store, key, list(BUCKET_FIELDS))
            joined = pc.binary_join_element_wise(
                *[table.column(f).cast(pa.string()) for f in BUCKET_FIELDS],
                _SEP,
                null_handling="replace",
                null_replacement=_NULL,
            )
            groups.update(pc.unique(joined).to_pylist())
            kernels.update(k for k in pc.unique(table.column("kernel").cast(pa.string()))
                           .to_pylist() if k is not None)  # fmt: skip
    except (NotFound, FileNotFoundError):
        return None
    return Touched(frozenset(groups), frozenset(kernels))


@dataclass
class RunSource:
    """The committed runs of a warehouse, as buckets of whole series."""

    store: ObjectStore
    snapshot: dict[str, Any]
    bucket_rows: int = BUCKET_ROWS
    history: History | None = None  # None: the packaged catalog's
    only: Touched | None = None  # None: every series

    @classmethod
    def open(
        cls,
        store: ObjectStore,
        *,
        bucket_rows: int = BUCKET_ROWS,
        history: History | None = None,
        only: Touched | None = None,
    ) -> RunSource:
        return cls(store, read_snapshot(store), bucket_rows, history, only)

    @property
    def seq(self) -> int:
        return int(self.snapshot.get("seq", 0))

    def families(self) -> dict[str, str]:
        return protocol_families(self.store, self.snapshot)

    @property
    def run_files(self) -> list[str]:
        return list(self.snapshot["tables"].get(RUNS, []))

    def versions(self) -> set[str]:
        return {v for v in map(release_of, self.run_files) if v is not None}

    def workload_count(self) -> int:
        """Distinct workloads in the warehouse (its `workloads` table: a few hundred rows)."""
        digests: set[str] = set()
        for key in self.snapshot["tables"].get(WORKLOADS, []):
            digests.update(read_parquet(self.store, key, ["digest"]).column("digest").to_pylist())
        return len(digests)

    def buckets(
        self, columns: list[str] | None = None, *, digits: int | None = None
    ) -> Iterator[pa.Table]:
        """Tables of whole series, each sorted by series key, release (PEP 440) and time.
        `digits`: `bucket_digits` where the caller has it."""
        files = self.run_files
        if not files:
            return
        machines = self.machines()
        ranks = self.ranks()
        cols = columns or RUN_COLUMNS
        if digits is None:
            digits = self.bucket_digits(self.file_rows(files))
        if digits == 0:
            parts = [t for k in files for t in self.row_groups(k, cols)]
            if not parts:
                return
            table = pa.concat_tables(parts, promote_options="permissive")
            yield with_series(table, machines, ranks, self.history)
            return
        with ScratchDir.create("series") as tmp:
            for path in self.split(files, cols, digits, tmp):
                # Not bound to a name here: a suspended generator would keep the bucket's
                # unsorted runs alive beside the sorted ones while the caller analyses them.
                yield with_series(read_bucket(path), machines, ranks, self.history)

    def machines(self) -> dict[str, Machine]:
        return environment_classes(self.store, self.snapshot)

    def ranks(self) -> dict[str, int]:
        return release_ranks(self.versions())

    def bucket_digits(self, rows: list[int]) -> int:
        """How many hex digits of the bucket hash split runs files of `rows` runs each
        (`file_rows`; 0: one bucket in memory)."""
        total = sum(rows)
        digits = 0
        while total / 16**digits > self.bucket_rows and digits < 3:
            digits += 1
        return digits

    def row_groups(
        self, key: str, cols: list[str], dictionaries: Iterable[str] = ()
    ) -> Iterator[pa.Table]:
        """A runs file's row groups; with `only`, the touched series' rows of the row groups
        whose kernel statistics can hold one (the others are not read). `dictionaries`:
        string columns read as dictionary arrays."""
        if self.only is None:
            yield from iter_parquet(self.store, key, cols, dictionaries)
            return
        touched = self.only.groups
        source = pq.ParquetFile(
            _parquet_source(self.store, key), read_dictionary=list(dictionaries)
        )
        wanted = _present(source.schema_arrow.names, cols)
        kernel_at = source.schema_arrow.names.index("kernel")
        for i in range(source.num_row_groups):
            stats = source.metadata.row_group(i).column(kernel_at).statistics
            if (
                stats is not None
                and stats.has_min_max
                and not any(stats.min <= k <= stats.max for k in self.only.kernels)
            ):
                continue
            # The grouping columns first: a row group whose kernels the statistics could not
            # rule out often holds none of the touched series (the rest is then never read).
            distinct, inverse = _groups(source.read_row_group(i, columns=list(BUCKET_FIELDS)))
            hit = np.array([_joined(group) in touched for group in distinct], bool)
            if hit.any():
                table = _completed(source.read_row_group(i, columns=wanted), cols)
                yield table.filter(pa.array(hit[inverse]))

    def file_rows(self, files: list[str]) -> list[int]:
        """Runs in each of `files`: Parquet footers locally; on a bucket, the folded log's
        counts (its checkpoint and the records since: not every runs file downloaded twice).
        The records alone would not do: files committed before a checkpoint counted 0, and
        a checkpointed warehouse was read as one bucket."""
        paths = [self.store.local_path(k) for k in files]
        if all(p is not None for p in paths):
            return [int(pq.ParquetFile(p).metadata.num_rows) for p in paths if p]
        from ..load.warehouse import Warehouse

        wh = Warehouse(self.store)
        wh.refresh()
        live = wh.state.tables.get(RUNS, {})
        return [live[k].rows if k in live else 0 for k in files]

    def split(
        self, files: list[str], cols: list[str], digits: int, folder: Path, *, processes: int = 1
    ) -> list[Path]:
        """Spill the runs of `files` into one Arrow IPC file per bucket in `folder`; their
        paths, in bucket-name order (the file's stem is the bucket's name; `read_bucket`
        reads one back). `processes`: how many split at once (`spill_budget`)."""
        folder.mkdir(parents=True, exist_ok=True)
        spill: _BucketFiles | None = None
        repeating = [c for c in cols if c in REPEATING_COLUMNS]
        # A row group at a time (a compacted release file holds a million runs or more),
        # each split into its buckets by one sort, not one filter pass per bucket.
        for key in files:
            for table in self.row_groups(key, cols, repeating):
                table = _encoded(table, repeating)
                if spill is None:
                    spill = _BucketFiles(folder, table.schema, spill_budget(processes))
                table = table.cast(spill.schema)
                # Measured once per row group: `nbytes` of a slice walks its buffers (a
                # tenth of a 5M-run analysis when asked of every piece).
                per_row = table.nbytes / max(table.num_rows, 1)
                for name, part in _split_by_group(table, digits):
                    spill.add(name, part, int(part.num_rows * per_row))
        return spill.close() if spill is not None else []


SPILL_BATCH_ROWS = 16_384
# What may wait before every bucket is written: 256 MiB in one splitting process at most, and
# 512 MiB in all the processes that split at once (eight workers hold 64 MiB each). Spread
# over 256 buckets, 64 MiB made batches of ~1,700 runs, and LZ4 over so many small buffers
# was most of the split (docs/performance.md, stop 42: over 4.4M runs in one process, 256 MiB
# against 64 MiB split in 8.6 s against 12.5 s and read back in 2.8 s against 5.5 s, with a
# peak of 650 MiB against 410).
SPILL_PROCESS_BYTES = 256 * 2**20
SPILL_TOTAL_BYTES = 512 * 2**20


def spill_budget(processes: int) -> int:
    """What each of `processes` splitting at once may hold waiting."""
    return min(SPILL_PROCESS_BYTES, SPILL_TOTAL_BYTES // max(processes, 1))


def _encoded(table: pa.Table, columns: Iterable[str]) -> pa.Table:
    """`columns` of `table` as dictionary arrays (a warehouse's older files lack some of them:
    those are read as null strings), so that every row group spills with one schema."""
    for name in columns:
        at = table.schema.get_field_index(name)
        if not pa.types.is_dictionary(table.schema.field(at).type):
            table = table.set_column(at, name, table.column(name).dictionary_encode())
    return table


def read_bucket(path: Path) -> pa.Table:
    """A bucket file of `RunSource.split`, its dictionary columns decoded: each row group's
    pieces came with their own dictionaries (an IPC stream, which allows that)."""
    with pa.memory_map(str(path)) as source:
        table = ipc.open_stream(source).read_all()
    decoded = pa.schema(
        f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    )
    return table.cast(decoded)


class _BucketFiles:
    """The buckets' spill files, written in batches of `SPILL_BATCH_ROWS` rows or more.

    A row group split 256 ways gives pieces of a few hundred rows, each its own IPC message
    and LZ4 frames when written alone, and a bucket of thousands of batches to read back.
    Pieces wait, at most `budget` bytes of them in all, and a bucket's are written
    together (over 4.4M runs, spill and buckets took 27 to 30 s against 28.5 to 39 s).
    """

    def __init__(self, folder: Path, schema: pa.Schema, budget: int) -> None:
        self.folder, self.schema, self.budget = folder, schema, budget
        self._writers: dict[str, ipc.RecordBatchStreamWriter] = {}
        self._pending: dict[str, list[pa.Table]] = {}
        self._rows: dict[str, int] = {}
        self._bytes = 0

    def add(self, name: str, part: pa.Table, nbytes: int) -> None:
        """`nbytes`: the piece's share of its row group's bytes.

        Pieces are slices of their row group, which stays in memory while any of them waits:
        a bucket written early does not give its bytes back (a skewed row group whose big
        bucket is written at once is still held by its small pieces), so `_bytes` counts
        every row group read since the last time everything was written, and the budget
        bounds what is really held."""
        self._pending.setdefault(name, []).append(part)
        self._rows[name] = self._rows.get(name, 0) + part.num_rows
        self._bytes += nbytes
        if self._rows[name] >= SPILL_BATCH_ROWS:
            self._flush(name)
        elif self._bytes > self.budget:
            for waiting in list(self._pending):
                self._flush(waiting)
            self._bytes = 0

    def _flush(self, name: str) -> None:
        parts = self._pending.pop(name)
        self._rows.pop(name)
        writer = self._writers.get(name)
        if writer is None:
            path = self._path(name)
            writer = self._writers[name] = ipc.new_stream(path, self.schema, options=_SPILL_OPTIONS)
        writer.write_table(pa.concat_tables(parts).combine_chunks())

    def close(self) -> list[Path]:
        """Write what waits, close the files; their paths in bucket-name order."""
        for name in list(self._pending):
            self._flush(name)
        for writer in self._writers.values():
            writer.close()
        names = sorted(self._writers)
        self._writers.clear()
        return [self._path(name) for name in names]

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.arrows"
