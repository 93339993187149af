"""The warehouse's tables as Arrow schemas: the one definition of every field list.

`RUN_SCHEMA` is what readers get back; `RUN_WRITE_SCHEMA` is how it is written (the columns
that depend only on a run's descriptor are dictionary-encoded, Parquet's own encoding too).
Each runs column says where its value comes from: `descriptor` (fixed by the run's descriptor
key, computed once per distinct key) or `row` (the row's own values and origin).
"""

from __future__ import annotations

import pyarrow as pa

from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS

_ORIGIN = b"origin"
# metric -> the unit-named column prefix its values go to (value_* holds both, by value_unit).
UNIT_COLUMNS = {"speed": "latency_ns", "memory": "peak_memory_bytes"}
QUANTILES = ("median", "p20", "p80")
DESCRIPTOR, ROW = b"descriptor", b"row"


_STATISTICS = b"statistics"


def _field(name: str, type_: pa.DataType, origin: bytes, *, statistics: bool = True) -> pa.Field:
    metadata = {_ORIGIN: origin}
    if not statistics:
        metadata[_STATISTICS] = b"none"
    return pa.field(name, type_, metadata=metadata)


def _s(name: str, origin: bytes = DESCRIPTOR, *, statistics: bool = True) -> pa.Field:
    """`statistics=False`: written without Parquet statistics. For long text that is distinct
    per run or per descriptor (ids, digests, descriptors): its values span every row group,
    so min/max skip none. Statistics on every column were a quarter of the runs table's write
    time; without these columns' the write takes ~10 % less (`benchmarks/micro_ingest.py`)."""
    return _field(name, pa.string(), origin, statistics=statistics)


def has_statistics(field: pa.Field) -> bool:
    """Whether a column is written with Parquet statistics (see `_s`)."""
    return (field.metadata or {}).get(_STATISTICS) != b"none"


RUN_SCHEMA = pa.schema(
    [
        _s("external_id", ROW, statistics=False),
        _s("series_id", statistics=False),
        _s("name", ROW, statistics=False),
        _s("title", statistics=False),
        _s("status", ROW),
        _s("metric"),
        _field("observed_at", pa.timestamp("ms", tz="UTC"), ROW),
        _s("kernel"),
        _s("operation_mode"),
        _s("provider"),
        _s("gpu_name"),
        _s("gpu_slug"),
        _s("gpu_architecture"),
        _s("liger_version"),
        _s("release_key"),  # liger_version as text that sorts in PEP 440 order; null if invalid
        _s("x_name"),
        _s("x_label", statistics=False),
        _s("x_value"),
        _field("x_value_number", pa.float64(), DESCRIPTOR),  # null when x is not a number
        _s("workload_slug", statistics=False),
        _s("dtype"),
        _s("config", statistics=False),
        _s("value_unit"),
        _field("value_median", pa.int64(), ROW),
        _field("value_p20", pa.int64(), ROW),
        _field("value_p80", pa.int64(), ROW),
        _field("source_p50", pa.float64(), ROW),
        _field("source_p20", pa.float64(), ROW),
        _field("source_p80", pa.float64(), ROW),
        # The same values again, in columns whose names carry the unit: null on the other metric.
        *(_field(f"{c}_{q}", pa.int64(), ROW) for c in UNIT_COLUMNS.values() for q in QUANTILES),
        _s("protocol_digest", statistics=False),
        _s("workload_digest", statistics=False),
        _s("environment_digest", statistics=False),
        _s("implementation_digest", statistics=False),
        _s("workload_descriptor", statistics=False),
        _s("implementation_descriptor", statistics=False),
        _field("known_kernel", pa.bool_(), DESCRIPTOR),
        _s("source_kernel"),  # the upstream kernel_name as written (`dyt_beta=True`)
        _s("workload_variant"),  # the catalog variant rule that named the keys; null if none
        _s("catalog_version"),  # the catalog that made this run (Catalog.version)
        _s("source_key", ROW),
        _s("source_etag", ROW),
        _field("source_row", pa.int64(), ROW),
        # Where the run came from (`extract.origin`): `ci`, `contributed`, `rerun`; null if
        # unknown. The upstream commit measured and its position in upstream's first-parent
        # history of main (the history catalog at ingest; null where either is unknown).
        _s("origin", ROW),
        _s("commit_sha", ROW),
        _field("commit_position", pa.int64(), ROW),
    ]
)

# Per-descriptor columns of the runs table, in RUN_SCHEMA order.
DESCRIPTOR_FIELDS = tuple(f.name for f in RUN_SCHEMA if f.metadata[_ORIGIN] == DESCRIPTOR)

# Per-descriptor string columns are written dictionary-encoded: no per-row copy of strings.
DICTIONARY_FIELDS = frozenset(
    f.name for f in RUN_SCHEMA if f.name in DESCRIPTOR_FIELDS and pa.types.is_string(f.type)
)

RUN_WRITE_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()), metadata=f.metadata)
        if f.name in DICTIONARY_FIELDS
        else f
        for f in RUN_SCHEMA
    ]
)

# Raw upstream columns are kept on held-back rows so they can be replayed verbatim.
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_key", pa.string()),
        ("source_etag", pa.string()),
        ("source_row", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("software", pa.string()),
        *[(name, pa.string()) for name in UPSTREAM_COLUMNS],
    ]
)

# One row per digest: the protocol, environment and descriptor tables.
PROTOCOL_SCHEMA = pa.schema(
    [
        ("digest", pa.string()),
        ("name", pa.string()),
        ("title", pa.string()),
        ("metric", pa.string()),
        ("timed_pass", pa.string()),
        ("notes", pa.string()),
        ("document", pa.string()),
    ]
)
ENVIRONMENT_SCHEMA = pa.schema(
    [
        ("digest", pa.string()),
        ("name", pa.string()),
        ("title", pa.string()),
        ("vendor", pa.string()),
        ("product", pa.string()),
        ("form_factor", pa.string()),
        ("architecture", pa.string()),
        ("software", pa.string()),
        ("document", pa.string()),
    ]
)
WORKLOAD_SCHEMA = pa.schema(
    [
        ("digest", pa.string()),
        ("kernel", pa.string()),
        ("dtype", pa.string()),
        ("parameters", pa.string()),
        ("workload_slug", pa.string()),
        ("catalog_version", pa.string()),
        ("descriptor", pa.string()),
    ]
)
IMPLEMENTATION_SCHEMA = pa.schema(
    [
        ("digest", pa.string()),
        ("provider", pa.string()),
        ("kernel", pa.string()),
        ("liger_version", pa.string()),
        ("descriptor", pa.string()),
    ]
)
