"""The warehouse's tables as Arrow schemas: the one definition of every field list.

`RUN_SCHEMA` is what readers get back; `RUN_WRITE_SCHEMA` is how it is written (the columns
that depend only on a run's descriptor are dictionary-encoded, Parquet's own encoding too).
Each runs column says where its value comes from: `descriptor` (fixed by the run's descriptor
key, computed once per distinct key) or `row` (the row's own values and origin).
"""

from __future__ import annotations

import pyarrow as pa

from kindex_etl.contracts.upstream import DEVICE_TIME_COLUMNS, UPSTREAM_COLUMNS

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
    time; without these columns' the write takes ~10 % less (`benchmarks/micro_ingest.py`, in
    git history)."""
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
        # The CSV's metric_name as written: `speed`, `memory`, or a device-time metric of our
        # re-runs (`device_time.cuda_graph.v1`), whose runs are `speed` timed by another
        # protocol. For device-time runs, the upstream timer's median of the same point in the
        # same run (ms), its ratio to the device time, and whether that is at least the
        # protocol's hostBoundFactor (upstream's figure then mostly measures the host); null on
        # every other run.
        _s("source_metric"),
        _field("upstream_timer_p50", pa.float64(), ROW),
        _field("upstream_over_device", pa.float64(), ROW),
        _field("host_bound", pa.bool_(), ROW),
        # Device-time runs: the GPU's state while the point was measured, as the re-run's
        # launcher read it from NVML (contracts.upstream.GPU_STATE_COLUMNS); null on every
        # other run, and where the run recorded no state (runs before issue 53, no NVML).
        _field("gpu_sm_clock_mhz", pa.int64(), ROW),
        _field("gpu_mem_clock_mhz", pa.int64(), ROW),
        _field("gpu_power_w", pa.float64(), ROW),
        _field("gpu_temperature_c", pa.int64(), ROW),
        _field("gpu_throttle_reasons", pa.int64(), ROW),
        _field("gpu_throttled", pa.bool_(), ROW),
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

# Raw upstream columns are kept on held-back rows so they can be replayed verbatim, and a
# device-time CSV's own columns after them (empty on upstream's rows; files written before
# they existed read them as null).
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_key", pa.string()),
        ("source_etag", pa.string()),
        ("source_row", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("software", pa.string()),
        *[(name, pa.string()) for name in UPSTREAM_COLUMNS],
        *[(name, pa.string()) for name in DEVICE_TIME_COLUMNS],
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

# The analysis's table (kindex_etl.analysis.schema: one row per change and state).
REGRESSIONS_SCHEMA = pa.schema(
    [
        ("change_id", pa.string()),
        ("series_key", pa.string()),
        ("series_class", pa.string()),
        ("kernel", pa.string()),
        ("operation_mode", pa.string()),
        ("metric", pa.string()),
        ("provider", pa.string()),
        ("workload_digest", pa.string()),
        ("workload_slug", pa.string()),
        ("x_value", pa.string()),
        ("protocol_digest", pa.string()),
        ("gpu_product", pa.string()),
        ("gpu_form_factor", pa.string()),
        ("gpu_name", pa.string()),
        ("software_class", pa.string()),
        ("before_release", pa.string()),
        ("after_release", pa.string()),
        ("before_releases", pa.int32()),
        ("after_releases", pa.int32()),
        ("before_runs", pa.int32()),
        ("after_runs", pa.int32()),
        ("before_run_ids", pa.list_(pa.string())),
        ("after_run_ids", pa.list_(pa.string())),
        ("before_value", pa.float64()),
        ("after_value", pa.float64()),
        ("value_unit", pa.string()),
        ("ratio", pa.float64()),
        ("ratio_low", pa.float64()),
        ("ratio_high", pa.float64()),
        ("p_value", pa.float64()),
        ("score", pa.float64()),
        ("noise", pa.float64()),
        ("direction", pa.string()),
        ("state", pa.string()),
        ("false_alarm_rate", pa.float64()),
        ("detector", pa.string()),
        ("warehouse_seq", pa.int64()),
        # Where the change is in upstream's history: the last commit measured before it and
        # the first after (with their positions), the release that first shipped the after
        # commit (null: none yet), and the series' origin (`ci`, `contributed`, `rerun`).
        ("origin", pa.string()),
        ("before_commit", pa.string()),
        ("after_commit", pa.string()),
        ("before_position", pa.int64()),
        ("after_position", pa.int64()),
        ("first_release", pa.string()),
        # The benchmark's harness revision in force on each side (a step between two is
        # state `harness`), the other providers' ratio over the same step (geometric mean;
        # their names) and this series' ratio relative to it (`environment` when only that
        # is within the minimum effect), and how many kernels stepped the same way at the
        # same commit on the same kind of machine.
        ("before_harness", pa.string()),
        ("after_harness", pa.string()),
        ("baseline_ratio", pa.float64()),
        ("baseline_providers", pa.list_(pa.string())),
        ("relative_ratio", pa.float64()),
        ("kernels_at_step", pa.int32()),
        # On a `retracted` row, the state the change had until then (null on every other):
        # whoever was told of an alert is told of its retraction, and only they.
        ("retracted_state", pa.string()),
        # The commit that wrote the row: of two rows of a change from analyses of the same
        # snapshot (equal warehouse_seq, analyses run at once), the later written is current.
        ("written_seq", pa.int64()),
        # What the detector's rules weighed (`kindex_etl/analysis/rules.py`, one clause each)
        # and, for an open change, the other cause they could not rule out.
        ("suspected", pa.string()),
        ("evidence", pa.string()),
    ]
)

# People's verdicts on changes (kindex_etl.report.triage).
TRIAGE_SCHEMA = pa.schema(
    [
        ("verdict_id", pa.string()),
        ("change_id", pa.string()),
        ("change_state", pa.string()),
        ("verdict", pa.string()),
        ("note", pa.string()),
        ("author", pa.string()),
        ("recorded_at", pa.timestamp("ms", tz="UTC")),
    ]
)


def millisecond_timestamps(table: pa.Table) -> pa.Table:
    """`table` with its timestamp columns in milliseconds, the contract's one unit.

    Delta's timestamp type is microseconds: files that delta-rs rewrote (its compaction) hold
    them so, where the ingest writes milliseconds. Read back here, both read alike."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.unit != "ms":
            type_ = pa.timestamp("ms", tz=f.type.tz)
            table = table.set_column(i, f.with_type(type_), table.column(i).cast(type_))
    return table
