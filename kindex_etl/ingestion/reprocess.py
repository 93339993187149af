"""Re-derive the whole warehouse with the current catalog, in one atomic commit.

A catalog change can move identities (a kernel name split, a key renamed, a protocol variant);
a warehouse must never mix old and new digests. Reprocess rebuilds every run and every held-back
row from the upstream values the warehouse itself keeps, so it needs no upstream object (the
cumulative file is overwritten upstream): per run its raw row (`source_kernel` or `kernel`,
pass, provider, metric, x, config, GPU, timestamp, release, the three upstream floats) and its
host software (from its environment); per held-back row its raw columns. Everything is
normalized again and committed as one batch that retires every live file.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.contracts.tables import QUARANTINE_SCHEMA
from kindex_etl.contracts.upstream import TIMESTAMP_FORMAT, UPSTREAM_COLUMNS
from kindex_etl.normalize.descriptors import metric_units

# Columns of the runs table that rebuild a run's upstream row.
RAW_RUN_COLUMNS = [
    "kernel",
    "operation_mode",
    "provider",
    "metric",
    "x_name",
    "x_label",
    "x_value",
    "config",
    "gpu_name",
    "observed_at",
    "liger_version",
    "source_p50",
    "source_p20",
    "source_p80",
    "environment_digest",
    "source_key",
    "source_etag",
    "source_row",
]
# Newer warehouses keep the kernel name exactly as upstream wrote it (`dyt_beta=True`).
SOURCE_KERNEL = "source_kernel"


def _text(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Upstream's float text: the shortest repr that reads back as the same double; nan if null."""
    out = pc.cast(values, pa.string())
    return pc.fill_null(out, "nan")


def upstream_rows(runs: pa.Table, software_of: dict[str, str]) -> pa.Table:
    """The runs' upstream rows, in the held-back rows' shape (QUARANTINE_SCHEMA, no reason).

    `software_of` maps an environment digest to its host software as canonical JSON ("" for
    upstream rows, which record none).
    """
    n = runs.num_rows
    kernel = runs.column("kernel")
    if SOURCE_KERNEL in runs.column_names:
        kernel = pc.coalesce(runs.column(SOURCE_KERNEL), kernel)
    units = metric_units()
    unit = pc.if_else(pc.equal(runs.column("metric"), "speed"), units["speed"], units["memory"])
    # An empty upstream pass was stored as `unspecified`; empty normalizes to it again.
    mode = pc.if_else(
        pc.equal(runs.column("operation_mode"), "unspecified"), "", runs.column("operation_mode")
    )
    envs = runs.column("environment_digest").combine_chunks().dictionary_encode()
    software = pa.array([software_of.get(d, "") for d in envs.dictionary.to_pylist()], pa.string())
    seconds = pc.cast(runs.column("observed_at"), pa.timestamp("s", tz="UTC"))
    columns = {
        "kernel_name": kernel,
        "kernel_provider": runs.column("provider"),
        "kernel_operation_mode": mode,
        "metric_name": runs.column("metric"),
        "metric_unit": unit,
        "x_name": runs.column("x_name"),
        "x_label": runs.column("x_label"),
        "x_value": runs.column("x_value"),
        "y_value_50": _text(runs.column("source_p50")),
        "y_value_20": _text(runs.column("source_p20")),
        "y_value_80": _text(runs.column("source_p80")),
        "extra_benchmark_config_str": runs.column("config"),
        "gpu_name": runs.column("gpu_name"),
        "timestamp": pc.strftime(seconds, format=TIMESTAMP_FORMAT),
        "liger_version": runs.column("liger_version"),
    }
    table = {
        "source_key": runs.column("source_key"),
        "source_etag": runs.column("source_etag"),
        "source_row": runs.column("source_row"),
        "reason": pa.array([""] * n, pa.string()),
        "detail": pa.array([""] * n, pa.string()),
        "software": software.take(envs.indices),
        **{name: columns[name] for name in UPSTREAM_COLUMNS},
    }
    return pa.table(
        {k: pc.cast(v, QUARANTINE_SCHEMA.field(k).type) for k, v in table.items()},
        schema=QUARANTINE_SCHEMA,
    )


def software_by_environment(environments: pa.Table | None) -> dict[str, str]:
    """Environment digest -> host software JSON, "" where the environment records none."""
    if environments is None:
        return {}
    return {
        d: ("" if s in ("", "{}") else s)
        for d, s in zip(
            environments.column("digest").to_pylist(),
            environments.column("software").to_pylist(),
            strict=True,
        )
    }
