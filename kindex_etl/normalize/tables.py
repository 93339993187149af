"""The tables the normalizer produces: runs and held-back rows, as Arrow schemas.

`RUN_SCHEMA` is what readers get back; `RUN_WRITE_SCHEMA` is how it is written (the columns
that depend only on a run's descriptor are dictionary-encoded, Parquet's own encoding too).
"""

from __future__ import annotations

import pyarrow as pa

from .rows import UPSTREAM_COLUMNS

# Raw upstream columns are kept on quarantined rows so they can be replayed verbatim.
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

RUN_SCHEMA = pa.schema(
    [
        ("external_id", pa.string()),
        ("series_id", pa.string()),
        ("name", pa.string()),
        ("title", pa.string()),
        ("status", pa.string()),
        ("metric", pa.string()),
        ("observed_at", pa.timestamp("ms", tz="UTC")),
        ("kernel", pa.string()),
        ("operation_mode", pa.string()),
        ("provider", pa.string()),
        ("gpu_name", pa.string()),
        ("gpu_slug", pa.string()),
        ("gpu_architecture", pa.string()),
        ("liger_version", pa.string()),
        ("x_name", pa.string()),
        ("x_label", pa.string()),
        ("x_value", pa.string()),
        ("workload_slug", pa.string()),
        ("dtype", pa.string()),
        ("config", pa.string()),
        ("value_unit", pa.string()),
        ("value_median", pa.int64()),
        ("value_p20", pa.int64()),
        ("value_p80", pa.int64()),
        ("source_p50", pa.float64()),
        ("source_p20", pa.float64()),
        ("source_p80", pa.float64()),
        ("protocol_digest", pa.string()),
        ("workload_digest", pa.string()),
        ("environment_digest", pa.string()),
        ("implementation_digest", pa.string()),
        ("workload_descriptor", pa.string()),
        ("implementation_descriptor", pa.string()),
        ("known_kernel", pa.bool_()),
        ("source_key", pa.string()),
        ("source_etag", pa.string()),
        ("source_row", pa.int64()),
    ]
)

# Per-descriptor columns of the runs table, in RUN_SCHEMA order.
DESCRIPTOR_FIELDS = (
    "series_id",
    "title",
    "metric",
    "kernel",
    "operation_mode",
    "provider",
    "gpu_name",
    "gpu_slug",
    "gpu_architecture",
    "liger_version",
    "x_name",
    "x_label",
    "x_value",
    "workload_slug",
    "dtype",
    "config",
    "value_unit",
    "protocol_digest",
    "workload_digest",
    "environment_digest",
    "implementation_digest",
    "workload_descriptor",
    "implementation_descriptor",
    "known_kernel",
)


# Per-descriptor string columns are written dictionary-encoded (see _build).
DICTIONARY_FIELDS = frozenset(DESCRIPTOR_FIELDS) - {"known_kernel"}

RUN_WRITE_SCHEMA = pa.schema(
    [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()))
        if f.name in DICTIONARY_FIELDS
        else f
        for f in RUN_SCHEMA
    ]
)
