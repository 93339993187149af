"""Helpers for the maintenance tests: a warehouse of many small commits, read from outside."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from kindex_etl import IngestOptions, ingest
from kindex_etl.load import layout
from kindex_etl.storage import open_store
from tests.warehouse import HEADER, documents, put_objects, synthetic_csv, tables

UNKNOWN_GPU_ROW = (
    "megatron_rms_norm,torch,full,speed,ms,H,hidden size,4096,0.2,0.19,0.21,"
    '"{""S"": 4096, ""B"": 1}",Mystery Accelerator 9000,2026-06-DAY 22:00:00,0.8.0\n'
)


def hourly_upstream(url: str, hours: int) -> None:
    """One object per "hour": distinct runs over two releases, plus one held-back row each."""
    objects = {}
    for h in range(hours):
        csv = synthetic_csv(["0.8.0", "0.8.1"], day=1 + h)
        held_back = UNKNOWN_GPU_ROW.replace("DAY", f"{1 + h:02d}")
        objects[f"benchmarks/{h:04d}/benchmark.csv"] = csv + held_back.encode()
    put_objects(url, objects)


def ingest_hourly(upstream: str, warehouse: str) -> None:
    """Every pending object, one commit each (as an hourly schedule would leave them)."""
    ingest(upstream, warehouse, IngestOptions(trigger=False, max_objects_per_commit=1))


def read_snapshot(url: str) -> dict[str, Any]:
    store = open_store(url)
    if store.head(layout.SNAPSHOT) is None:
        return {"seq": 0, "tables": {}}
    data: dict[str, Any] = json.loads(store.get_bytes(layout.SNAPSHOT))
    return data


def view(url: str, snap: Mapping[str, Any]) -> dict[str, Any]:
    """What a reader of this snapshot sees: every table's rows and every kind's documents."""
    store = open_store(url)
    objects = {k: store.get_bytes(k) for keys in snap["tables"].values() for k in keys}
    parquet: dict[str, pa.Table] = tables(objects)
    return {
        "tables": {t: v.to_pylist() for t, v in parquet.items()},
        "documents": documents(objects),
    }


def run_ids(seen: Mapping[str, Any]) -> list[str]:
    return sorted(r["external_id"] for r in seen["tables"].get(layout.RUNS, []))


__all__ = ["HEADER", "hourly_upstream", "ingest_hourly", "read_snapshot", "run_ids", "view"]
