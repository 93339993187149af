"""The per-row reference normalizer: one upstream row to one document bundle, via the models.

It is the readable statement of the mapping rules. The warehouse is written by the columnar
normalizer (`columnar.py`), which tests hold equal to this one row for row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kindex_etl.catalog import Catalog
from kindex_etl.contracts.device_protocol import host_bound
from kindex_etl.contracts.documents import BenchmarkRun
from kindex_etl.contracts.upstream import (
    DEVICE_TIME_COLUMNS,
    GPU_STATE_COLUMNS,
    MIB,
    NS_PER_MS,
    NUMBER,
    TIMESTAMP,
    TIMESTAMP_FORMAT,
)
from kindex_etl.normalize.columnar import host_bound_factor
from kindex_etl.normalize.descriptors import Descriptor, DescriptorKey, Rejected, resolve, run_name
from kindex_etl.normalize.documents import device_native, gpu_value
from kindex_etl.normalize.slugs import timestamp_slug


@dataclass(frozen=True)
class Bundle:
    run: dict[str, Any]
    protocol: dict[str, Any]
    environment: dict[str, Any]
    descriptor: Descriptor


def descriptor_key(row: Mapping[str, str], software: str = "") -> DescriptorKey:
    return DescriptorKey(
        kernel=row["kernel_name"],
        mode=row["kernel_operation_mode"],
        provider=row["kernel_provider"],
        metric=row["metric_name"],
        unit=row["metric_unit"],
        x_name=row["x_name"],
        x_label=row["x_label"],
        x_value=row["x_value"],
        config=row["extra_benchmark_config_str"],
        gpu_name=row["gpu_name"],
        liger_version=row["liger_version"],
        software=software,
    )


def parse_timestamp(text: str) -> datetime:
    if not TIMESTAMP.match(text):
        raise Rejected("bad_timestamp", f"timestamp {text!r} is not 'YYYY-MM-DD HH:MM:SS'")
    try:
        return datetime.strptime(text, TIMESTAMP_FORMAT)
    except ValueError as exc:
        raise Rejected("bad_timestamp", f"timestamp {text!r}: {exc}") from None


def parse_value(column: str, text: str) -> float:
    if not NUMBER.match(text):
        raise Rejected("bad_value", f"{column} {text!r} is not a number")
    return float(text)


def _upstream_figure(text: str | None) -> float | None:
    """A device-time row's upstream-timer median: a finite number, or unknown."""
    if text is None or not NUMBER.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def normalize_row(catalog: Catalog, row: Mapping[str, str], software: str = "") -> Bundle:
    descriptor = resolve(catalog, descriptor_key(row, software))
    ts = row["timestamp"]
    parse_timestamp(ts)
    values = {q: parse_value(f"y_value_{q}", row[f"y_value_{q}"]) for q in ("50", "20", "80")}
    finite = {q: v for q, v in values.items() if math.isfinite(v)}
    ts_slug = timestamp_slug(ts)
    speed = descriptor.metric == "speed"
    scale, unit, metric = (NS_PER_MS, "ns", "latency") if speed else (MIB, "bytes", "peak_memory")
    prefix = "ms" if speed else "mb"
    scaled = {q: round(v * scale) for q, v in finite.items()}
    spec: dict[str, Any] = {
        "status": "passed" if len(finite) == 3 else "failed",
        "observedAt": ts.replace(" ", "T") + ".000Z",
        "measurements": [
            {"unit": unit, "value": scaled[q], "metric": metric, "statistic": f"p{q}"}
            for q in ("20", "80")
            if q in scaled
        ],
        "sourceNative": {
            "metrics": {f"{prefix}_{q}": finite.get(q) for q in ("20", "50", "80")},
            "benchmark": descriptor.benchmark,
            "externalId": f"{descriptor.series_id}/{ts_slug}",
        },
        "protocolDigest": descriptor.protocol_digest,
        "workloadDigest": descriptor.workload_digest,
        "environmentDigest": descriptor.environment_digest,
        "implementationDigest": descriptor.implementation_digest,
    }
    if descriptor.device:
        upstream = _upstream_figure(row.get(DEVICE_TIME_COLUMNS[0]))
        factor = host_bound_factor(catalog)
        over, bound = host_bound(upstream, values["50"], factor)
        gpu = {c: gpu_value(c, row.get(c)) for c in GPU_STATE_COLUMNS}
        spec["sourceNative"]["deviceTime"] = device_native(upstream, over, bound, gpu)
    if "50" in scaled:
        stats = {"median": scaled["50"]}
        if speed:
            spec["timing"] = {"latencyNs": stats}
        else:
            spec["memory"] = {"peakBytes": stats}
    run = BenchmarkRun.model_validate(
        {
            "metadata": {
                "name": run_name(descriptor, ts_slug),
                "title": descriptor.title,
                "labels": descriptor.labels,
            },
            "spec": spec,
        }
    )
    return Bundle(
        run=run.document(),
        protocol=descriptor.protocol,
        environment=descriptor.environment,
        descriptor=descriptor,
    )
