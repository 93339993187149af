"""The columnar normalizer: Arrow record batches of upstream rows in, runs out.

Per batch, everything row-wise is Arrow compute or numpy; Python runs once per *distinct*
descriptor key (see descriptors.py). JSON documents are assembled as Arrow strings from
pre-rendered per-descriptor fragments and per-row number columns, so a batch's JSON lines end up
in one contiguous buffer that is written as is.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.catalog import Catalog
from kindex_etl.contracts import device_protocol
from kindex_etl.contracts.tables import (
    DESCRIPTOR_FIELDS,
    QUANTILES,
    RUN_SCHEMA,
    RUN_WRITE_SCHEMA,
    UNIT_COLUMNS,
)
from kindex_etl.contracts.upstream import (
    DEVICE_TIME_COLUMNS,
    GPU_STATE_COLUMNS,
    MIB,
    NS_PER_MS,
    NUMBER,
    TIMESTAMP,
    TIMESTAMP_FORMAT,
)
from kindex_etl.contracts.versions import release_key
from kindex_etl.normalize.dedup import splitmix64
from kindex_etl.normalize.descriptors import (
    KEY_COLUMNS,
    Descriptor,
    DescriptorKey,
    Hashed,
    Parts,
    Rejected,
    ResolvedWorkload,
    Resolver,
    SharedPart,
    labels_of,
)
from kindex_etl.normalize.documents import (
    GPU_NATIVE,
    device_native,
    fragments,
    gpu_value,
    head_of,
    json_str,
    run_documents,
)
from kindex_etl.normalize.key_index import KeyIndex
from kindex_etl.normalize.origin_columns import origin_columns
from kindex_etl.normalize.quarantine import quarantine_table

_EPOCH_LIMIT = 1 << 32
_INT64_LIMIT = float(1 << 63)
# The parts a descriptor is made of, in the order of `Descriptor.parts`.
PART_KINDS = ("shared", "workload", "protocol", "implementation")


def x_number(text: str) -> float | None:
    """The swept x as a number (for sorting and plotting), or None when it is not one."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def descriptor_values(d: Descriptor) -> dict[str, Any]:
    """The per-descriptor columns of a run (`DESCRIPTOR_FIELDS`), by name."""
    return dict(zip(DESCRIPTOR_FIELDS, descriptor_row(d), strict=True))


def descriptor_row(d: Descriptor) -> tuple[Any, ...]:
    """`descriptor_values` as a tuple in `DESCRIPTOR_FIELDS` order (no dict per descriptor)."""
    k = d.key
    return (
        d.series_id,  # series_id
        d.title,  # title
        d.metric,  # metric
        d.kernel,  # kernel
        k.mode or "unspecified",  # operation_mode
        k.provider,  # provider
        k.gpu_name,  # gpu_name
        d.gpu_slug,  # gpu_slug
        d.environment["spec"]["hardware"]["architecture"],  # gpu_architecture
        k.liger_version,  # liger_version
        _release_key(k.liger_version),  # release_key
        k.x_name,  # x_name
        k.x_label,  # x_label
        k.x_value,  # x_value
        x_number(k.x_value),  # x_value_number
        d.workload_slug,  # workload_slug
        d.dtype,  # dtype
        k.config,  # config
        "ns" if d.metric == "speed" else "bytes",  # value_unit
        d.protocol_digest,  # protocol_digest
        d.workload_digest,  # workload_digest
        d.environment_digest,  # environment_digest
        d.implementation_digest,  # implementation_digest
        d.workload_canonical,  # workload_descriptor
        d.implementation_canonical,  # implementation_descriptor
        d.known_kernel,  # known_kernel
        k.kernel,  # source_kernel
        d.variant,  # workload_variant
        d.catalog_version,  # catalog_version
        k.metric,  # source_metric
    )


# Versions are few and every descriptor of a release asks for the same key.
_release_key = lru_cache(maxsize=4096)(release_key)


# Chunks stop merging at this many descriptors (~2.3 KB of columns each on real history):
# merging every chunk copied the whole table at once (~150 MB at a 65,536 cap). With the
# bound, Arrow's pool peaked at 444 to 452 MiB in a 5M-row ingest instead of 472 to 474; the
# table has at most cap / this + log2(this) chunks, each batch's columns one take from each.
MAX_CHUNK_DESCRIPTORS = 1 << 14


@dataclass
class DescriptorTable:
    """Descriptors resolved so far in this process, as columns that rows index into."""

    catalog: Catalog
    resolver: Resolver = field(init=False)
    descriptors: list[Descriptor] = field(default_factory=list)
    # Known keys by the process-wide codes of their column values (`codes_of`), one int32 row
    # per key: a batch finds its distinct keys in numpy (a hash of each row, a binary search,
    # the rows compared), where one bytes object and one dict probe per key held the GIL for
    # 2.1 s of a 5M-row ingest. A key's descriptor id, or -1-i for the i-th rejection.
    keys: KeyIndex = field(default_factory=lambda: KeyIndex())
    rejection_reasons: list[str] = field(default_factory=list)
    rejection_details: list[str] = field(default_factory=list)
    _value_codes: dict[str, dict[str, int]] = field(default_factory=dict)
    # Per key column, the value of each code: new keys are made of these strings, one object
    # per distinct value, where a key's own copies cost ~600 bytes a descriptor.
    _values: dict[str, list[str]] = field(default_factory=dict)
    # What is kept per descriptor, and per part (`stored_columns`, `PART_COLUMNS`).
    _stored: _Growing = field(default_factory=lambda: _Growing())
    _part_tables: dict[str, _Growing] = field(
        default_factory=lambda: {kind: _Growing() for kind in PART_KINDS}
    )
    _is_speed: np.ndarray = field(default_factory=lambda: np.zeros(1024, dtype=bool))

    def __post_init__(self) -> None:
        self.resolver = Resolver(self.catalog)

    def lookup(self, key: DescriptorKey) -> int | Rejected:
        """Resolve a key not seen before: its new descriptor id, or why it is held back.

        Callers remember the answer (`id_of`, by the key's codes), so this runs once per key.
        """
        try:
            descriptor = self.resolver.resolve(key)
        except Rejected as rejected:
            return rejected.bare()
        except (ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as exc:
            # Anything else one key trips over is that key's fault, not the run's: its rows
            # are held back, with the error as the detail so the cause stays visible.
            return Rejected("unprocessable_row", f"{type(exc).__name__}: {str(exc)[:300]}")
        n = len(self.descriptors)
        if n == len(self._is_speed):
            self._is_speed = np.concatenate([self._is_speed, np.zeros(n, dtype=bool)])
        self._is_speed[n] = descriptor.metric == "speed"
        self.descriptors.append(descriptor)
        return n

    def codes_of(self, column: str, values: pa.Array) -> np.ndarray:
        """This table's int32 codes of a batch's distinct values of one key column."""
        known = self._value_codes.setdefault(column, {})
        codes = np.fromiter(
            (known.setdefault(v, len(known)) for v in values.to_pylist()),
            dtype=np.int32,
            count=len(values),
        )
        names = self._values.setdefault(column, [])
        if len(known) > len(names):  # dicts keep insertion order: the new codes come last
            names.extend(itertools.islice(known, len(names), None))
        return codes

    def values_of(self, column: str, codes: np.ndarray) -> list[str]:
        """The values of `codes` (from `codes_of`) of one key column."""
        names = self._values[column]
        return [names[c] for c in codes.tolist()]

    def id_of(self, key: DescriptorKey) -> int:
        """The descriptor id of a new key, or -1-i for the i-th rejection."""
        found = self.lookup(key)
        if isinstance(found, Rejected):
            self.rejection_reasons.append(found.reason)
            self.rejection_details.append(found.detail)
            return -len(self.rejection_reasons)
        return found

    def is_speed(self) -> np.ndarray:
        """Per descriptor id: whether it is a speed descriptor (a view, no copy)."""
        return self._is_speed[: len(self.descriptors)]

    def columns_of(self, ids: np.ndarray) -> dict[str, pa.Array]:
        """Per-descriptor columns of the descriptors `ids` (sorted, distinct), in that order."""
        self._convert_new()
        if not self._stored.size or not len(ids):
            return _descriptor_columns([])
        stored = self._stored.take(ids)
        per_part = {kind: self._part_tables[kind].take_any(stored[kind]) for kind in PART_KINDS}
        return assemble_columns(stored, per_part, self.resolver.catalog.version)

    def _convert_new(self) -> None:
        # In an ingest this runs on the builder thread while the normalizing thread may append
        # descriptors and parts: convert up to lengths read once, parts after descriptors (a
        # descriptor's parts are registered before it is).
        end = len(self.descriptors)
        if self._stored.size == end:
            return
        self._stored.append(stored_columns(self.descriptors[self._stored.size : end]))
        for kind, registry in zip(PART_KINDS, _registries(self.resolver.parts), strict=True):
            table, made = self._part_tables[kind], len(registry)
            if table.size < made:
                table.append(PART_COLUMNS[kind](registry[table.size : made]))


@dataclass
class _Growing:
    """Rows appended a few at a time, taken by index: chunks whose sizes at least double
    leftwards, so appending is amortized O(log n) copies a row (one concatenation per batch
    made an ingest quadratic in its distinct descriptors), up to MAX_CHUNK_DESCRIPTORS rows a
    chunk (merging every chunk copied the whole table at once)."""

    chunks: list[pa.RecordBatch] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    size: int = 0

    def append(self, columns: dict[str, pa.Array]) -> None:
        batch = pa.RecordBatch.from_pydict(columns)
        if not batch.num_rows:
            return
        self.chunks.append(batch)
        self.starts.append(self.size)
        self.size += batch.num_rows
        while len(self.chunks) > 1 and (
            self.chunks[-2].num_rows <= 2 * self.chunks[-1].num_rows
            and self.chunks[-2].num_rows + self.chunks[-1].num_rows <= MAX_CHUNK_DESCRIPTORS
        ):
            right = self.chunks.pop()
            self.starts.pop()
            self.chunks[-1] = pa.concat_batches([self.chunks[-1], right])

    def take(self, ids: np.ndarray) -> dict[str, pa.Array]:
        """The rows `ids` (sorted, distinct): one take per chunk, all columns at once; fresh
        arrays, which pin no chunk."""
        starts = np.asarray(self.starts, dtype=np.int64)
        chunk_of = np.searchsorted(starts, ids, side="right") - 1
        bounds = np.searchsorted(chunk_of, np.arange(len(self.chunks) + 1))
        parts = [
            chunk.take(pa.array(ids[lo:hi] - starts[c], pa.int64()))
            for c, (chunk, lo, hi) in enumerate(
                zip(self.chunks, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
            )
            if lo < hi
        ]
        taken = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
        return dict(zip(taken.schema.names, taken.columns, strict=True))

    def take_any(self, ids: pa.Array) -> dict[str, pa.Array]:
        """The rows `ids`, in any order and repeated."""
        used, position = np.unique(ids.to_numpy(), return_inverse=True)
        by = pa.array(position.reshape(-1), pa.int64())
        return {name: column.take(by) for name, column in self.take(used).items()}


def _registries(parts: Parts) -> tuple[list[Any], ...]:
    return (parts.shared, parts.workloads, parts.protocols, parts.implementations)


def stored_columns(descriptors: list[Descriptor]) -> dict[str, pa.Array]:
    """What a descriptor table keeps per descriptor: its parts' indices, x_label, name prefix.

    The rest of a run's descriptor columns are one value per part (shared part, workload,
    protocol, implementation), kept per part: per descriptor they were ~2 KB (the digests,
    canonical descriptors and document fragments), ~100 MiB of Arrow's pool at the descriptor
    cap, and one Python tuple per descriptor to make (~19 us with the GIL held).
    """
    ids = np.array([d.parts for d in descriptors], dtype=np.int32).reshape(-1, 4)
    columns = {name: pa.array(ids[:, i]) for i, name in enumerate(PART_KINDS)}
    columns["x_label"] = pa.array([d.key.x_label for d in descriptors], pa.string())
    columns["name_prefix"] = pa.array([d.name_prefix for d in descriptors], pa.string())
    return columns


def _typed(values: list[Any], name: str) -> pa.Array:
    return pa.array(values, RUN_SCHEMA.field(name).type)


def _json_inner(text: str) -> str:
    return json_str(text)[1:-1]


def shared_columns(shared: list[SharedPart]) -> dict[str, pa.Array]:
    """One row per shared part: what its descriptors take from it."""
    metric = [s.metric for s in shared]
    return {
        "series": _typed([s.series for s in shared], "series_id"),
        "series_json": pa.array([_json_inner(s.series) for s in shared], pa.string()),
        # The externalId's segment after the workload (`/memory`, a device-time metric's).
        "suffix": pa.array([s.suffix for s in shared], pa.string()),
        "source_metric": _typed([s.key.metric for s in shared], "source_metric"),
        "is_device": pa.array([s.device for s in shared], pa.bool_()),
        "title": _typed([s.title for s in shared], "title"),
        "metric": _typed(metric, "metric"),
        "operation_mode": _typed([s.mode for s in shared], "operation_mode"),
        "mode_json": pa.array([_json_inner(s.mode) for s in shared], pa.string()),
        "provider": _typed([s.key.provider for s in shared], "provider"),
        "gpu_name": _typed([s.key.gpu_name for s in shared], "gpu_name"),
        "gpu_slug": _typed([s.gpu_slug for s in shared], "gpu_slug"),
        "gpu_architecture": _typed(
            [s.environment.doc["spec"]["hardware"]["architecture"] for s in shared],
            "gpu_architecture",
        ),
        "liger_version": _typed([s.key.liger_version for s in shared], "liger_version"),
        "release_key": _typed([_release_key(s.key.liger_version) for s in shared], "release_key"),
        "value_unit": _typed(["ns" if m == "speed" else "bytes" for m in metric], "value_unit"),
        "environment_digest": _typed([s.environment.digest for s in shared], "environment_digest"),
        "known_kernel": _typed([s.kernel is not None for s in shared], "known_kernel"),
        "source_kernel": _typed([s.key.kernel for s in shared], "source_kernel"),
        "is_speed": pa.array([m == "speed" for m in metric], pa.bool_()),
        # A document's head (labels, title): the part's, and whether the workload matched a
        # catalog variant.
        "head_matched": pa.array([head_of(s.title, labels_of(s, True)) for s in shared]),
        "head_unmatched": pa.array([head_of(s.title, labels_of(s, False)) for s in shared]),
    }


def workload_columns(workloads: list[ResolvedWorkload]) -> dict[str, pa.Array]:
    """One row per workload: what its descriptors take from it."""
    return {
        "kernel": _typed([w.kernel for w in workloads], "kernel"),
        "kernel_json": pa.array([_json_inner(w.kernel) for w in workloads], pa.string()),
        "x_name": _typed([w.key.x_name for w in workloads], "x_name"),
        "x_value": _typed([w.key.x_value for w in workloads], "x_value"),
        "x_value_number": _typed([x_number(w.key.x_value) for w in workloads], "x_value_number"),
        "workload_slug": _typed([w.slug for w in workloads], "workload_slug"),
        "slug_json": pa.array([_json_inner(w.slug) for w in workloads], pa.string()),
        "dtype": _typed([w.dtype for w in workloads], "dtype"),
        "config": _typed([w.key.config for w in workloads], "config"),
        "workload_digest": _typed([w.hashed.digest for w in workloads], "workload_digest"),
        "workload_descriptor": _typed(
            [w.hashed.canonical for w in workloads], "workload_descriptor"
        ),
        "workload_variant": _typed([w.variant for w in workloads], "workload_variant"),
        "unmatched": pa.array([w.variant is None for w in workloads], pa.bool_()),
    }


def protocol_columns(protocols: list[Hashed]) -> dict[str, pa.Array]:
    return {"protocol_digest": _typed([h.digest for h in protocols], "protocol_digest")}


def implementation_columns(implementations: list[Hashed]) -> dict[str, pa.Array]:
    return {
        "implementation_digest": _typed(
            [h.digest for h in implementations], "implementation_digest"
        ),
        "implementation_descriptor": _typed(
            [h.canonical for h in implementations], "implementation_descriptor"
        ),
    }


PART_COLUMNS: dict[str, Callable[[list[Any]], dict[str, pa.Array]]] = {
    "shared": shared_columns,
    "workload": workload_columns,
    "protocol": protocol_columns,
    "implementation": implementation_columns,
}


def assemble_columns(
    stored: dict[str, pa.Array], per_part: dict[str, dict[str, pa.Array]], catalog_version: str
) -> dict[str, pa.Array]:
    """The descriptor columns (DESCRIPTOR_FIELDS, then the document fragments, name prefix and
    is_speed) from what is kept per descriptor and its parts' columns, row for row."""
    s, w = per_part["shared"], per_part["workload"]
    columns = {**s, **w, **per_part["protocol"], **per_part["implementation"]}
    n = len(stored["x_label"])
    columns.update(
        # Resolver.resolve's series id, from the same parts.
        series_id=pc.binary_join_element_wise(
            s["series"], "/", w["workload_slug"], s["suffix"], ""
        ),
        x_label=stored["x_label"],
        catalog_version=pa.repeat(pa.scalar(catalog_version, pa.string()), n),
    )
    cols = {name: columns[name] for name in DESCRIPTOR_FIELDS}
    cols["frag_head"] = pc.if_else(w["unmatched"], s["head_unmatched"], s["head_matched"])
    # JSON escapes character by character: the escaped text of a join is the join of the
    # parts' escaped texts (documents.fragments renders the same text from one descriptor).
    cols["frag_middle"] = pc.binary_join_element_wise(
        '"},"spec":{"environmentDigest":"', columns["environment_digest"],
        '","implementationDigest":"', columns["implementation_digest"],
        '","protocolDigest":"', columns["protocol_digest"],
        '","workloadDigest":"', columns["workload_digest"],
        '","sourceNative":{"benchmark":"', w["kernel_json"], "/", s["mode_json"],
        '","source":"liger-kernel-bench","externalId":"',
        s["series_json"], "/", w["slug_json"], s["suffix"], "/",
        "",
    )  # fmt: skip
    cols["name_prefix"] = stored["name_prefix"]
    cols["is_speed"] = s["is_speed"]
    cols["is_device"] = s["is_device"]
    return cols


def _descriptor_columns(descriptors: list[Descriptor]) -> dict[str, pa.Array]:
    """The descriptor columns from one Python tuple per descriptor: what
    `DescriptorTable.columns_of` (made per part) must equal, and the empty columns."""
    rows = [descriptor_row(d) for d in descriptors]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(DESCRIPTOR_FIELDS)
    cols: dict[str, pa.Array] = {
        name: pa.array(values, type=RUN_SCHEMA.field(name).type)
        for name, values in zip(DESCRIPTOR_FIELDS, columns, strict=True)
    }
    frags = [fragments(d) for d in descriptors]
    for i, part in enumerate(("frag_head", "frag_middle")):
        cols[part] = pa.array([f[i] for f in frags], type=pa.string())
    cols["name_prefix"] = pa.array([d.name_prefix for d in descriptors], type=pa.string())
    cols["is_speed"] = pa.array([d.metric == "speed" for d in descriptors], type=pa.bool_())
    cols["is_device"] = pa.array([d.device for d in descriptors], type=pa.bool_())
    return cols


@dataclass
class NormalizedBatch:
    runs: pa.Table  # RUN_SCHEMA, one row per valid input row (dedup happens after)
    json_lines: pa.StringArray  # one document per run, each ending in '\n'
    quarantine: pa.Table  # QUARANTINE_SCHEMA
    descriptor_ids: np.ndarray  # per valid row, index into DescriptorTable.descriptors
    keys: np.ndarray  # per valid row: uint64 run key
    fingerprints: np.ndarray  # per valid row
    good: np.ndarray  # per valid row: its index in the input batch

    # What an ingest asks of a batch, as PreparedBatch answers it (runs already built).
    def versions(self, keep: np.ndarray) -> set[str]:
        column = self.runs.column("liger_version").filter(pa.array(keep)).cast(pa.string())
        return set(pc.unique(column).to_pylist())

    def external_ids(self, mask: np.ndarray) -> list[str]:
        return cast(list[str], self.runs.column("external_id").filter(pa.array(mask)).to_pylist())

    def build(self, keep: np.ndarray | None = None) -> tuple[pa.Table, pa.StringArray]:
        if keep is None:
            return self.runs, self.json_lines
        mask = pa.array(keep)
        return self.runs.filter(mask), self.json_lines.filter(mask)


@dataclass
class PreparedBatch:
    """A batch normalized as far as dedup needs: run keys, fingerprints, held-back rows.

    The runs' columns and documents (most of the per-row work, mostly Arrow compute that
    releases the GIL) are made by `build`, for the rows dedup keeps: in an ingest on a thread
    of its own, beside the next batch's descriptor lookups. It holds the descriptor
    table it was prepared against, which stays valid after the normalizer resets its own.
    """

    keys: np.ndarray  # per valid row: uint64 run key
    fingerprints: np.ndarray  # per valid row
    descriptor_ids: np.ndarray  # per valid row, index into `table.descriptors`
    good: np.ndarray  # per valid row: its index in the input batch
    quarantine: pa.Table  # QUARANTINE_SCHEMA
    table: DescriptorTable
    values: dict[str, np.ndarray]  # per input row, by quantile
    stamps: Timestamps
    ts_codes: np.ndarray  # per valid row, into `stamps`
    source_key: str
    source_etag: str
    lines: np.ndarray  # per input row
    releases: pa.Array  # per input row: its liger_version
    software: str = ""  # host facts of the object's environment.json ("" for upstream)
    upstream_p50: np.ndarray | None = None  # per input row: a device-time CSV's extra column
    gpu: dict[str, pa.Array] | None = None  # per input row: its GPU_STATE_COLUMNS, as text

    def versions(self, keep: np.ndarray) -> set[str]:
        """The releases of the kept rows (a descriptor's release is its row's text)."""
        kept = self.releases.take(pa.array(self.good[keep], pa.int64()))
        return set(pc.unique(kept).to_pylist())

    def external_ids(self, mask: np.ndarray) -> list[str]:
        """externalIds of the rows `mask` picks (the same text `build` writes)."""
        found = self.table.descriptors
        slugs = self.stamps.slug
        return [
            f"{found[g].series_id}/{slugs[int(c)].as_py()}"
            for g, c in zip(self.descriptor_ids[mask], self.ts_codes[mask], strict=True)
        ]

    def build(self, keep: np.ndarray | None = None) -> tuple[pa.Table, pa.StringArray]:
        """The runs (RUN_WRITE_SCHEMA) and their JSON lines, for the rows `keep` picks (all)."""
        good, gid, ts_codes = self.good, self.descriptor_ids, self.ts_codes
        if keep is not None:
            good, gid, ts_codes = good[keep], gid[keep], ts_codes[keep]
        return _build_runs(
            self.table, good, gid, self.values, self.source_key, self.source_etag, self.lines,
            self.stamps, ts_codes, self.software, self.upstream_p50, self.gpu,
        )  # fmt: skip


def _encoded(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """One dictionary array for a plain or dictionary-encoded column (chunks unified)."""
    if pa.types.is_dictionary(column.type):
        unified = column.unify_dictionaries().combine_chunks()
        assert isinstance(unified, pa.DictionaryArray)
        return unified
    encoded = column.combine_chunks().dictionary_encode()
    assert isinstance(encoded, pa.DictionaryArray)
    return encoded


def value_fingerprint(
    p50: np.ndarray, p20: np.ndarray, p80: np.ndarray, ident: np.ndarray
) -> np.ndarray:
    """A 64-bit fingerprint of a run's values and of what produced them.

    Two rows with the same run key are one measurement if their fingerprints agree; otherwise
    they conflict and the later one is held back.
    """
    out = splitmix64(ident.astype(np.uint64))
    for i, column in enumerate((p50, p20, p80)):
        # Every failed point reads back as null from Parquet: treat all non-finite alike.
        bits = np.where(np.isfinite(column), column, np.nan).astype(np.float64).view(np.uint64)
        out ^= splitmix64(bits + np.uint64(i + 1))
    return out


# The run columns a stored run's identity and value fingerprint are computed from.
STORED_KEY_COLUMNS = [
    "series_id",
    "observed_at",
    "source_p50",
    "source_p20",
    "source_p80",
    "implementation_digest",
    "workload_digest",
]

STORED_INDEX_SCHEMA = pa.schema(
    [
        ("series_id", pa.dictionary(pa.int32(), pa.string())),
        ("observed_s", pa.int64()),
        ("fingerprint", pa.uint64()),
    ]
)


def stored_index(runs: pa.Table) -> pa.Table:
    """Each stored run's series, observed second and value fingerprint (STORED_INDEX_SCHEMA).

    Process-independent (unlike run keys, whose series numbers are per process), so it can be
    kept beside a checkpoint and turned into keys by any process (`keys_of_index`).
    """
    seconds = pc.cast(pc.cast(runs.column("observed_at"), pa.timestamp("s", tz="UTC")), pa.int64())
    # The ident of _ident_hash, one column at a time: xor needs no joined string, and the
    # columns may be dictionary-encoded (runs as normalized, not read back).
    ident = np.zeros(runs.num_rows, dtype=np.uint64)
    for name in ("implementation_digest", "workload_digest"):
        column = _encoded(runs.column(name))
        hashes = np.asarray(
            [int(t[7:23], 16) for t in column.dictionary.to_pylist()], dtype=np.uint64
        )
        ident ^= hashes[column.indices.to_numpy(zero_copy_only=False)]
    p50, p20, p80 = (
        pc.fill_null(runs.column(c), float("nan")).to_numpy()
        for c in ("source_p50", "source_p20", "source_p80")
    )
    return pa.table(
        [
            _encoded(runs.column("series_id")),
            seconds,
            pa.array(value_fingerprint(p50, p20, p80, ident), pa.uint64()),
        ],
        schema=STORED_INDEX_SCHEMA,
    )


def merge_indexes(parts: list[pa.Table]) -> pa.Table:
    """One `stored_index` of several, each run once (the first of its key: a run's key repeats
    only where compaction rewrote it, with the same fingerprint)."""
    table = pa.concat_tables(
        [
            p.cast(pa.schema([("series_id", pa.string()), *list(STORED_INDEX_SCHEMA)[1:]]))
            for p in parts
        ]
    )
    series = table.column("series_id").combine_chunks().dictionary_encode()
    codes = series.indices.to_numpy(zero_copy_only=False).astype(np.uint64)
    keys = (codes << np.uint64(32)) | table.column("observed_s").to_numpy().astype(np.uint64)
    _, first = np.unique(keys, return_index=True)
    first.sort()
    return pa.table(
        [
            series.take(pa.array(first)),
            table.column("observed_s").take(pa.array(first)),
            table.column("fingerprint").take(pa.array(first)),
        ],
        schema=STORED_INDEX_SCHEMA,
    )


def _groups(combined: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal values: each group's first row, and each row's group.

    Groups are numbered in the order they first appear. A hash (Arrow's dictionary encoding)
    where `np.unique` sorts: 0.3 ms against 1.35 ms for a 20k-row block, on the thread that
    holds the GIL for the rest of the normalizing.
    """
    inverse = pa.array(combined).dictionary_encode().indices.to_numpy(zero_copy_only=False)
    # A group's number is one more than the highest before its first row: where that rises.
    highest = np.maximum.accumulate(inverse)
    first = np.flatnonzero(np.diff(highest, prepend=-1) > 0)
    return first, inverse.astype(np.intp, copy=False)


def _ident_hash(d: Descriptor) -> int:
    return int(d.implementation_digest[7:23], 16) ^ int(d.workload_digest[7:23], 16)


@dataclass
class Timestamps:
    """Distinct upstream timestamps, parsed once; epoch is -1 where a value is invalid."""

    epoch: np.ndarray
    slug: pa.Array
    observed: pa.Array
    timestamp: pa.Array

    @classmethod
    def parse(cls, texts: pa.Array) -> Timestamps:
        seconds = pc.strptime(texts, format=TIMESTAMP_FORMAT, unit="s", error_is_null=True)
        ok = pc.fill_null(
            pc.and_(pc.match_substring_regex(texts, TIMESTAMP.pattern), pc.is_valid(seconds)),
            False,
        ).to_numpy(zero_copy_only=False)
        epoch = pc.fill_null(pc.cast(seconds, pa.int64()), -1).to_numpy(zero_copy_only=False)
        epoch = np.where(ok & (epoch >= 0) & (epoch < _EPOCH_LIMIT), epoch, -1)
        return cls(
            epoch=epoch,
            slug=pc.replace_substring(pc.replace_substring(texts, " ", "-"), ":", "-"),
            observed=pc.binary_join_element_wise(
                pc.replace_substring(texts, " ", "T"), pa.scalar(".000Z"), ""
            ),
            timestamp=pc.cast(seconds, pa.timestamp("ms", tz="UTC")),
        )


class ColumnarNormalizer:
    """Turns upstream record batches into runs; holds the per-process descriptor caches."""

    def __init__(self, catalog: Catalog) -> None:
        self.table = DescriptorTable(catalog)
        self.series: dict[str, int] = {}
        # Per descriptor id: its series number and identity hash, as the arrays a batch
        # indexes (a list turned into an array per batch held the GIL ~0.6 ms each time).
        self._series_of = np.zeros(0, dtype=np.uint64)
        self._ident_of = np.zeros(0, dtype=np.uint64)

    def descriptors_over(self, cap: int) -> bool:
        return len(self.table.descriptors) > cap

    def reset_descriptors(self) -> None:
        """Forget the resolved descriptors (ids start again at 0) and the resolver's caches.

        Memory for descriptors grows with distinct (kernel, provider, pass, metric, x, config,
        GPU, release) keys, which on real history is about half the rows: a long ingest
        drops them now and then and resolves again what comes back. The resolver's caches
        (shared parts per kernel, pass, provider, GPU and release; workloads) grow with the
        same keys, more slowly (9.5k -> 41k shared parts from 1M to 5M realistic rows): they
        go too, so what a long ingest holds for descriptors is bounded by the cap alone.
        Series numbers (and so run keys) are kept: they must not change within a process.
        """
        self.table = DescriptorTable(self.table.catalog)
        self._series_of = np.zeros(0, dtype=np.uint64)
        self._ident_of = np.zeros(0, dtype=np.uint64)

    def series_index(self, series_id: str) -> int:
        return self.series.setdefault(series_id, len(self.series))

    def keys_of_stored(self, runs: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Run keys and fingerprints of runs already in the warehouse, or normalized by another
        process (whose series numbers differ from ours): see RunIndex."""
        return self.keys_of_index(stored_index(runs))

    def keys_of_index(self, index: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Run keys and fingerprints from a `stored_index` table (this process's series ids)."""
        series = index.column("series_id").combine_chunks()
        if not isinstance(series, pa.DictionaryArray):
            series = series.dictionary_encode()
        ids = np.asarray(
            [self.series_index(s) for s in series.dictionary.to_pylist()], dtype=np.uint64
        )
        local = ids[series.indices.to_numpy(zero_copy_only=False)]
        seconds = index.column("observed_s").to_numpy().astype(np.uint64)
        keys = (local << np.uint64(32)) | seconds
        return keys, index.column("fingerprint").to_numpy().astype(np.uint64)

    def _descriptor_ids(
        self, batch: pa.RecordBatch, software: str
    ) -> tuple[np.ndarray, list[str], list[str]]:
        """Per row: the index of its descriptor, or -1-i for the i-th rejection reason."""
        # Group rows by their key columns through per-column dictionary codes: far cheaper
        # than hashing the joined strings, and keys are rebuilt from one row per group.
        table = self.table
        combined: np.ndarray | None = None
        size = 1
        global_codes = []
        for name in KEY_COLUMNS:
            encoded = batch.column(name).dictionary_encode()
            codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            global_codes.append((table.codes_of(name, encoded.dictionary), codes))
            width = max(len(encoded.dictionary), 1)
            if combined is None:
                combined, size = codes, width
                continue
            if size * width >= 1 << 62:
                uniq, combined = np.unique(combined, return_inverse=True)
                size = len(uniq)
            combined = combined * width + codes
            size *= width
        assert combined is not None
        first, inverse = _groups(combined)
        software_code = table.codes_of("software", pa.array([software], pa.string()))
        group_codes = np.stack(
            [
                *(mapping[codes[first]] for mapping, codes in global_codes),
                np.repeat(software_code, len(first)),
            ],
            axis=1,
        )
        local_ids, found, hashes = table.keys.find(group_codes)
        missing = np.flatnonzero(~found)
        if len(missing):
            new = group_codes[missing]
            values = [table.values_of(name, new[:, i]) for i, name in enumerate(KEY_COLUMNS)]
            local_ids[missing] = [
                table.id_of(DescriptorKey._make((*parts, software)))
                for parts in zip(*values, strict=True)
            ]
            table.keys.add(group_codes[missing], hashes[missing], local_ids[missing])
        new_descriptors = table.descriptors[len(self._series_of) :]
        if new_descriptors:
            count = len(new_descriptors)
            series = (self.series_index(d.series_id) for d in new_descriptors)
            ident = (_ident_hash(d) for d in new_descriptors)
            self._series_of = np.concatenate(
                [self._series_of, np.fromiter(series, dtype=np.uint64, count=count)]
            )
            self._ident_of = np.concatenate(
                [self._ident_of, np.fromiter(ident, dtype=np.uint64, count=count)]
            )
        return local_ids[inverse], table.rejection_reasons, table.rejection_details

    def normalize(
        self,
        batch: pa.RecordBatch,
        *,
        source_key: str,
        source_etag: str,
        lines: np.ndarray,
        software: str = "",
    ) -> NormalizedBatch:
        """Every valid row of `batch` as a run, with its document; the rest held back."""
        prepared = self.prepare(
            batch, source_key=source_key, source_etag=source_etag, lines=lines, software=software
        )
        runs, json_lines = prepared.build()
        return NormalizedBatch(
            runs=runs,
            json_lines=json_lines,
            quarantine=prepared.quarantine,
            descriptor_ids=prepared.descriptor_ids,
            keys=prepared.keys,
            fingerprints=prepared.fingerprints,
            good=prepared.good,
        )

    def prepare(
        self,
        batch: pa.RecordBatch,
        *,
        source_key: str,
        source_etag: str,
        lines: np.ndarray,
        software: str = "",
    ) -> PreparedBatch:
        """`normalize` up to what dedup needs; `PreparedBatch.build` makes the runs."""
        n = batch.num_rows
        gids, reject_reasons, reject_details = self._descriptor_ids(batch, software)
        reason: list[str | None] = [None] * n
        detail: list[str | None] = [None] * n
        bad = gids < 0
        for i in np.flatnonzero(bad):
            reason[i] = reject_reasons[-1 - gids[i]]
            detail[i] = reject_details[-1 - gids[i]]

        # Timestamps repeat across a benchmark invocation: parse each distinct one once.
        ts_encoded = batch.column("timestamp").dictionary_encode()
        ts_codes = ts_encoded.indices.to_numpy(zero_copy_only=False)
        stamps = Timestamps.parse(ts_encoded.dictionary)
        epoch = stamps.epoch[ts_codes]
        ts_bad = epoch < 0
        for i in np.flatnonzero(ts_bad & ~bad):
            reason[i] = "bad_timestamp"
            detail[i] = (
                f"timestamp {batch.column('timestamp')[i].as_py()!r} is not "
                "'YYYY-MM-DD HH:MM:SS' (UTC) between 1970 and 2106"
            )
        bad |= ts_bad

        values: dict[str, np.ndarray] = {}
        for q in ("50", "20", "80"):
            column = batch.column(f"y_value_{q}")
            try:
                values[q] = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
                continue
            except pa.ArrowInvalid:
                pass  # some value is not a number: find which, row by row below
            ok = pc.match_substring_regex(column, NUMBER.pattern).to_numpy(zero_copy_only=False)
            for i in np.flatnonzero(~ok & ~bad):
                reason[i] = "bad_value"
                detail[i] = f"y_value_{q} {column[i].as_py()!r} is not a number"
            bad |= ~ok
            cleaned = pc.if_else(pa.array(ok), pc.utf8_trim_whitespace(column), "nan")
            values[q] = pc.cast(cleaned, pa.float64()).to_numpy(zero_copy_only=False)

        bad |= self._out_of_range(gids, bad, values, reason, detail)

        good = np.flatnonzero(~bad)
        gid = gids[good]
        series = self._series_of[gid]
        keys = (series << np.uint64(32)) | epoch[good].astype(np.uint64)
        ident = self._ident_of[gid]
        fps = value_fingerprint(values["50"][good], values["20"][good], values["80"][good], ident)

        bad_idx = np.flatnonzero(bad)
        quarantine = quarantine_table(
            batch,
            bad_idx,
            [reason[i] or "" for i in bad_idx],
            [detail[i] or "" for i in bad_idx],
            source_key,
            source_etag,
            lines,
            software,
        )
        return PreparedBatch(
            keys=keys,
            fingerprints=fps,
            descriptor_ids=gid,
            good=good,
            quarantine=quarantine,
            table=self.table,
            values=values,
            stamps=stamps,
            ts_codes=ts_codes[good],
            source_key=source_key,
            source_etag=source_etag,
            lines=lines,
            releases=batch.column("liger_version"),
            software=software,
            upstream_p50=_optional_floats(batch, DEVICE_TIME_COLUMNS[0]),
            gpu=_gpu_texts(batch),
        )

    def _out_of_range(
        self,
        gids: np.ndarray,
        bad: np.ndarray,
        values: dict[str, np.ndarray],
        reason: list[str | None],
        detail: list[str | None],
    ) -> np.ndarray:
        """Rows whose finite values are negative or do not fit int64 ns / bytes once scaled.

        Checked before the cast: a cast of 1e20 ms to int64 nanoseconds wraps silently.
        Non-finite values stay failed runs (status `failed`), not held back.
        """
        is_speed = self.table.is_speed()
        speed = np.zeros(len(gids), dtype=bool)
        speed[~bad] = is_speed[gids[~bad]]
        scale = np.where(speed, float(NS_PER_MS), float(MIB))
        out = np.zeros(len(gids), dtype=bool)
        for q in ("50", "20", "80"):
            v = values[q]
            with np.errstate(invalid="ignore", over="ignore"):
                wrong = np.isfinite(v) & ((v < 0) | (np.abs(v) * scale >= _INT64_LIMIT))
            for i in np.flatnonzero(wrong & ~bad & ~out):
                unit = "ms" if speed[i] else "MiB"
                reason[i] = "value_out_of_range"
                detail[i] = (
                    f"y_value_{q} {v[i]!r} {unit} is negative or beyond int64 "
                    f"{'nanoseconds' if speed[i] else 'bytes'}"
                )
            out |= wrong & ~bad
        return out


# The runs columns only device-time runs fill (`device_extras`).
DEVICE_RUN_COLUMNS = (
    "upstream_timer_p50",
    "upstream_over_device",
    "host_bound",
    *GPU_STATE_COLUMNS,
)
_GPU_TYPES = {int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def host_bound_factor(catalog: Catalog) -> float:
    """Upstream's figure over device time at which a point is host-bound (protocols.json)."""
    spec = catalog.protocols["deviceTime"] if catalog.protocols else device_protocol.spec()
    return float(spec["hostBoundFactor"])


def _optional_floats(batch: pa.RecordBatch, name: str) -> np.ndarray | None:
    """A column of numbers the batch may not have: float64, NaN where a value is no number
    (it says something about a run, never whether the row is one)."""
    if name not in batch.schema.names:
        return None
    column = batch.column(name)
    ok = pc.fill_null(pc.match_substring_regex(column, NUMBER.pattern), False)
    cleaned = pc.if_else(ok, pc.utf8_trim_whitespace(column), "nan")
    return cast(np.ndarray, pc.cast(cleaned, pa.float64()).to_numpy(zero_copy_only=False))


def _gpu_texts(batch: pa.RecordBatch) -> dict[str, pa.Array] | None:
    """The batch's GPU_STATE_COLUMNS it has (a device-time CSV's, issue 53), else None."""
    texts = {c: batch.column(c) for c in GPU_STATE_COLUMNS if c in batch.schema.names}
    return texts or None


def device_extras(
    is_device: pa.Array,
    device_p50: np.ndarray,
    upstream_p50: np.ndarray | None,
    factor: float,
    gpu: dict[str, pa.Array] | None = None,
) -> dict[str, pa.Array]:
    """Per run: DEVICE_RUN_COLUMNS (null but on device-time runs) and `native`, the text its
    document's sourceNative adds (`deviceTime`: hostBound, upstreamOverDevice, upstreamP50Ms,
    and `gpu` where the row carries the GPU's state: `gpu` holds the rows' GPU_STATE_COLUMNS
    as text, read by `documents.gpu_value` as the reference normalizer reads them).

    As `gpu.device_time.host_bound` flags a point: the ratio rounded to 4 places, host-bound
    where the ratio reaches the factor; no ratio (a figure missing or not positive), not
    host-bound. Python per device-time run: they are our re-runs' few, upstream's have none.
    """
    n = len(is_device)
    device = np.asarray(is_device.to_numpy(zero_copy_only=False), dtype=bool)
    if not device.any():  # upstream's rows: every column null, built without a Python list
        return {
            **{c: pa.nulls(n, RUN_SCHEMA.field(c).type) for c in DEVICE_RUN_COLUMNS},
            "native": pa.array([""] * n, pa.string()),
        }
    up: list[float | None] = [None] * n
    over: list[float | None] = [None] * n
    bound: list[bool | None] = [None] * n
    native = [""] * n
    state: dict[str, list[Any]] = {c: [None] * n for c in GPU_STATE_COLUMNS}
    for i in np.flatnonzero(device).tolist():
        u = float(upstream_p50[i]) if upstream_p50 is not None else math.nan
        up[i] = u if math.isfinite(u) else None
        over[i], bound[i] = device_protocol.host_bound(up[i], float(device_p50[i]), factor)
        for c, texts in (gpu or {}).items():
            state[c][i] = gpu_value(c, texts[i].as_py())
        row_state = {c: state[c][i] for c in GPU_STATE_COLUMNS}
        native[i] = ',"deviceTime":' + json.dumps(
            device_native(up[i], over[i], bool(bound[i]), row_state),
            separators=(",", ":"),
            sort_keys=True,
        )
    return {
        "upstream_timer_p50": pa.array(up, pa.float64()),
        "upstream_over_device": pa.array(over, pa.float64()),
        "host_bound": pa.array(bound, pa.bool_()),
        **{c: pa.array(state[c], _GPU_TYPES[GPU_NATIVE[c][1]]) for c in GPU_STATE_COLUMNS},
        "native": pa.array(native, pa.string()),
    }


def _build_runs(
    table: DescriptorTable,
    good: np.ndarray,
    gid: np.ndarray,
    values: dict[str, np.ndarray],
    source_key: str,
    source_etag: str,
    lines: np.ndarray,
    stamps: Timestamps,
    ts_codes: np.ndarray,
    software: str = "",
    upstream_p50: np.ndarray | None = None,
    gpu: dict[str, pa.Array] | None = None,
) -> tuple[pa.Table, pa.StringArray]:
    """The run columns and documents of rows `good` (descriptors `gid`, timestamps `ts_codes`)."""
    # A batch's dictionaries hold only the descriptors it uses: with the whole process's
    # descriptor columns as dictionary, every batch waiting in the release buffers pinned
    # its own full copy (batches x descriptors, ~5 KB per run on varied data).
    used, inverse = np.unique(gid, return_inverse=True)
    codes = pa.array(inverse.reshape(-1), pa.int32())
    cols = table.columns_of(used)
    take = codes
    ts_take = pa.array(ts_codes, pa.int64())
    n = len(good)
    is_speed = cols["is_speed"].take(take)
    scale = pc.if_else(is_speed, float(NS_PER_MS), float(MIB))
    raw = {q: pa.array(values[q][good], pa.float64()) for q in values}
    finite = {q: pc.is_finite(raw[q]) for q in raw}
    scaled = {
        q: pc.if_else(
            finite[q],
            pc.cast(pc.round(pc.multiply(raw[q], scale)), pa.int64(), safe=False),
            None,
        )
        for q in raw
    }
    all_finite = pc.and_(pc.and_(finite["50"], finite["20"]), finite["80"])
    status = pc.if_else(all_finite, "passed", "failed")
    ts_slug = stamps.slug.take(ts_take)
    observed = stamps.observed.take(ts_take)
    names = pc.utf8_rtrim(
        pc.utf8_slice_codeunits(
            pc.binary_join_element_wise(cols["name_prefix"].take(take), ts_slug, "-"), 0, 100
        ),
        characters="-",
    )
    external = pc.binary_join_element_wise(cols["series_id"].take(take), ts_slug, "/")

    device = device_extras(
        cols["is_device"].take(take),
        values["50"][good],
        None if upstream_p50 is None else upstream_p50[good],
        host_bound_factor(table.catalog),
        None if gpu is None else {c: t.take(pa.array(good, pa.int64())) for c, t in gpu.items()},
    )
    json_lines = run_documents(
        cols, take, is_speed, names, observed, ts_slug, raw, finite, scaled, device["native"]
    )

    table_cols: dict[str, Any] = {}
    for f in RUN_SCHEMA:
        if f.name in cols:
            # Per-descriptor columns stay dictionary-encoded: no per-row copy of strings,
            # and Parquet stores them as dictionary pages anyway.
            column = cols[f.name]
            # Parquet cannot write a null inside a dictionary: such columns (dtype of an
            # unknown kernel) take the plain path and are encoded by the writer's cast.
            table_cols[f.name] = (
                pa.DictionaryArray.from_arrays(codes, column)
                if pa.types.is_string(column.type) and column.null_count == 0
                else column.take(take)
            )
    observed_at = stamps.timestamp.take(ts_take)
    table_cols.update(
        external_id=external,
        name=names,
        status=status,
        observed_at=observed_at,
        value_median=scaled["50"],
        value_p20=scaled["20"],
        value_p80=scaled["80"],
        source_p50=pc.if_else(finite["50"], raw["50"], None),
        source_p20=pc.if_else(finite["20"], raw["20"], None),
        source_p80=pc.if_else(finite["80"], raw["80"], None),
        **{
            f"{UNIT_COLUMNS[metric]}_{q}": pc.if_else(
                is_speed if metric == "speed" else pc.invert(is_speed), scaled[src], None
            )
            for metric in UNIT_COLUMNS
            for q, src in zip(QUANTILES, ("50", "20", "80"), strict=True)
        },
        source_key=pa.array([source_key] * n, pa.string()),
        source_etag=pa.array([source_etag] * n, pa.string()),
        source_row=pa.array(lines[good], pa.int64()),
        **origin_columns(
            source_key, software, cols["liger_version"].take(take), observed=observed_at
        ),
        **{name: device[name] for name in DEVICE_RUN_COLUMNS},
    )
    runs = pa.table([table_cols[f.name] for f in RUN_SCHEMA], schema=RUN_WRITE_SCHEMA)
    return runs, json_lines
