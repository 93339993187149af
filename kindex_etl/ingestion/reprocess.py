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

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.catalog import Catalog, default_catalog
from kindex_etl.config import settings
from kindex_etl.contracts.tables import QUARANTINE_SCHEMA, RUN_SCHEMA
from kindex_etl.contracts.upstream import (
    DEVICE_TIME_COLUMNS,
    GPU_STATE_COLUMNS,
    TIMESTAMP_FORMAT,
    UPSTREAM_COLUMNS,
)
from kindex_etl.errors import PreconditionFailed, StorageError
from kindex_etl.ingestion.batch import Ingestor
from kindex_etl.ingestion.commit import COMMIT_ATTEMPTS
from kindex_etl.ingestion.replay import open_quarantine_of, sources_of
from kindex_etl.load import layout
from kindex_etl.load.faults import fault_point
from kindex_etl.load.record import REPROCESS, CommitRecord
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.normalize.descriptors import metric_units
from kindex_etl.normalize.quarantine import FILE_LEVEL_REASONS

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
# Newer warehouses keep the CSV's metric_name (a device-time metric's runs are `speed`) and a
# device-time run's upstream-timer figure, which its row carried in one more column.
SOURCE_METRIC, UPSTREAM_TIMER = "source_metric", "upstream_timer_p50"
# Tables a reprocess leaves as they are (kindex_etl.analysis writes them, not the ingest).
ANALYSES = frozenset({layout.REGRESSIONS, f"documents/{layout.REGRESSIONS}"})
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
    metric = runs.column("metric")
    if SOURCE_METRIC in runs.column_names:
        metric = pc.coalesce(runs.column(SOURCE_METRIC), metric)
    metric = pc.cast(metric, pa.string())
    names = metric.combine_chunks().dictionary_encode()
    units = metric_units()
    unit = pa.array([units.get(m, "") for m in names.dictionary.to_pylist()], pa.string())
    unit = unit.take(names.indices)
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
        "metric_name": metric,
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
    # A device-time run's own columns (read by the normalizer for device-time rows only,
    # contracts.upstream): the upstream timer's figure and the GPU state, by the CSV's names.
    device: dict[str, Any] = dict.fromkeys(DEVICE_TIME_COLUMNS, pa.array([""] * n, pa.string()))
    if UPSTREAM_TIMER in runs.column_names:
        device[DEVICE_TIME_COLUMNS[0]] = _text(runs.column(UPSTREAM_TIMER))
    for name in GPU_STATE_COLUMNS:
        if name in runs.column_names:
            device[name] = pc.fill_null(pc.cast(runs.column(name), pa.string()), "")
    table = {
        "source_key": runs.column("source_key"),
        "source_etag": runs.column("source_etag"),
        "source_row": runs.column("source_row"),
        "reason": pa.array([""] * n, pa.string()),
        "detail": pa.array([""] * n, pa.string()),
        "software": software.take(envs.indices),
        **{name: columns[name] for name in UPSTREAM_COLUMNS},
        **device,
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


# -- the command -------------------------------------------------------------------------------


@dataclass
class ReprocessReport:
    """What a reprocess moved (rows are matched by their upstream identity: key, ETag, line)."""

    warehouse: str
    catalog_version: str
    runs_before: int = 0
    runs_after: int = 0
    held_before: int = 0
    held_after: int = 0
    moved: int = 0  # runs whose external id or any digest changed
    released: int = 0  # held-back rows that are runs now
    newly_held: int = 0  # runs that are held back now
    files_retired: int = 0
    commit: int | None = None  # None: nothing would change, nothing was committed
    examples: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_IDENTITY = ["source_key", "source_etag", "source_row"]
_COMPARED = [
    "external_id",
    "protocol_digest",
    "workload_digest",
    "environment_digest",
    "implementation_digest",
]


def _identity(table: pa.Table) -> list[tuple[str, str, int]]:
    return list(zip(*(table.column(c).to_pylist() for c in _IDENTITY), strict=True))


def _read(warehouse: Warehouse, keys: list[str], columns: list[str] | None) -> pa.Table | None:
    batch_of = warehouse.batch_of()
    parts = [warehouse.read_file(batch_of[k], k, columns) for k in keys]
    return pa.concat_tables(parts, promote_options="permissive") if parts else None


# Columns only device-time runs fill: kept where any file has them, null in the files written
# before them (those files hold no device-time run: null is what they would hold). Dropping
# them for a warehouse whose older files lack them would rebuild device-time runs as
# upstream-timer ones, without their state.
DEVICE_TIME_RUN_COLUMNS = (SOURCE_METRIC, UPSTREAM_TIMER, *GPU_STATE_COLUMNS)


def _live_runs(warehouse: Warehouse, columns: list[str]) -> pa.Table:
    """The committed runs' columns that exist in every file (older files lack newer columns),
    and the DEVICE_TIME_RUN_COLUMNS any file has (null where a file lacks them)."""
    batch_of = warehouse.batch_of()
    parts = []
    for key in warehouse.files(layout.RUNS):
        f = warehouse.read_file(batch_of[key], key, None)
        parts.append(f.select([c for c in columns if c in f.column_names]))
    if not parts:
        return pa.table({c: pa.array([], pa.string()) for c in columns})
    common = set.intersection(*(set(p.column_names) for p in parts))
    for c in DEVICE_TIME_RUN_COLUMNS:
        present = [p.schema.field(c).type for p in parts if c in p.column_names]
        if c in columns and present:
            common.add(c)
            parts = [
                p if c in p.column_names else p.append_column(c, pa.nulls(p.num_rows, present[0]))
                for p in parts
            ]
    return pa.concat_tables(
        [p.select([c for c in columns if c in common]) for p in parts],
        promote_options="permissive",
    )


def reprocess(warehouse_url: str, *, catalog: Catalog | None = None) -> ReprocessReport:
    """Re-normalize every run and held-back row with `catalog` (default: the current one) and
    commit the result as one batch that retires every live file; a no-op when nothing moves."""
    catalog = catalog or default_catalog()
    warehouse = open_warehouse(warehouse_url, create=False)
    warehouse.recover(timedelta(seconds=settings().orphan_grace_s))
    for _attempt in range(COMMIT_ATTEMPTS):
        warehouse.refresh()
        report = ReprocessReport(warehouse=warehouse.store.url, catalog_version=catalog.version)
        wanted = list(
            dict.fromkeys(
                [
                    *RAW_RUN_COLUMNS,
                    *_COMPARED,
                    SOURCE_KERNEL,
                    *DEVICE_TIME_RUN_COLUMNS,
                    "catalog_version",
                ]
            )
        )
        runs = _live_runs(warehouse, wanted)
        envs = _read(warehouse, warehouse.files(layout.ENVIRONMENTS), ["digest", "software"])
        held = open_quarantine_of(warehouse)
        fixed = pc.is_in(held.column("reason"), pa.array(sorted(FILE_LEVEL_REASONS)))
        carry, held_rows = held.filter(fixed), held.filter(pc.invert(fixed))
        rows = pa.concat_tables(
            [upstream_rows(runs, software_by_environment(envs)), held_rows],
            promote_options="permissive",
        )
        report.runs_before, report.held_before = runs.num_rows, held.num_rows

        ingestor = Ingestor(warehouse, catalog, fresh=True)
        salt = f"reprocess:{catalog.version}"
        staged = ingestor.process(sources_of(rows), salt=salt, carry=carry)
        record = staged.record
        assert record is not None  # a fresh ingestor always has the files of every row
        new_runs = _read_staged(warehouse, record, layout.RUNS, [*_IDENTITY, *_COMPARED])
        new_held = _read_staged(warehouse, record, layout.QUARANTINE, [*_IDENTITY, "reason"])
        _compare(report, runs, held_rows, new_runs, new_held)
        report.runs_after, report.held_after = new_runs.num_rows, new_held.num_rows
        stamped = (
            "catalog_version" in runs.column_names
            and pc.all(pc.equal(runs.column("catalog_version"), catalog.version)).as_py()
        )
        if not report.moved and not report.released and not report.newly_held and stamped:
            warehouse.drop_staging(record.batch)
            return report
        # Everything derived from upstream rows is re-derived; what the analyses recorded is
        # history, not derived here: retiring it made the next analysis re-announce every alert.
        live = sorted(k for k in warehouse.state.live() if layout.table_of(k) not in ANALYSES)
        record = record.model_copy(update={"kind": REPROCESS, "retires": live, "rebuild": True})
        try:
            report.commit = warehouse.commit(record)
        except PreconditionFailed:
            warehouse.discard(record.batch)  # someone committed first: do it again on theirs
            continue
        fault_point("reprocess_after_commit")
        warehouse.publish(record)
        warehouse.update_snapshot()
        report.files_retired = len(live)
        return report
    raise StorageError(
        f"gave up reprocessing after {COMMIT_ATTEMPTS} commit conflicts on {warehouse.store.url}"
    )


def _read_staged(
    warehouse: Warehouse, record: CommitRecord, table: str, columns: list[str]
) -> pa.Table:
    parts = [
        warehouse.read_file(record.batch, f.key, columns)
        for f in record.files
        if layout.table_of(f.key) == table
    ]
    if not parts:  # e.g. nothing held back any more: the table's own schema, empty
        schema = QUARANTINE_SCHEMA if table == layout.QUARANTINE else RUN_SCHEMA
        return pa.table({c: pa.array([], schema.field(c).type) for c in columns})
    return pa.concat_tables(parts)


def _compare(
    report: ReprocessReport,
    runs: pa.Table,
    held: pa.Table,
    new_runs: pa.Table,
    new_held: pa.Table,
) -> None:
    before = dict(zip(_identity(runs), zip(*(runs.column(c).to_pylist() for c in _COMPARED),
                                           strict=True), strict=True))  # fmt: skip
    after = dict(zip(_identity(new_runs), zip(*(new_runs.column(c).to_pylist() for c in _COMPARED),
                                              strict=True), strict=True))  # fmt: skip
    was_held = set(_identity(held))
    for ident, values in after.items():
        old = before.get(ident)
        if old is None:
            if ident in was_held:
                report.released += 1
        elif old != values:
            report.moved += 1
            if len(report.examples) < 5:
                report.examples.append({"from": str(old[0]), "to": str(values[0])})
    report.newly_held = sum(1 for ident in _identity(new_held) if ident in before)
