"""Protocol, environment, workload and implementation tables: one row per new digest.

Protocols and environments are documents too, so they also go to the JSON store; workloads
and implementations are descriptors, stored canonically so anyone can recompute their digests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from kindex_etl.contracts.tables import (
    ENVIRONMENT_SCHEMA,
    IMPLEMENTATION_SCHEMA,
    PROTOCOL_SCHEMA,
    WORKLOAD_SCHEMA,
)
from kindex_etl.load import layout
from kindex_etl.load.writers import JsonLinesWriter, ParquetTableWriter, WrittenFile
from kindex_etl.normalize.descriptors import Descriptor

Row = dict[str, Any]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _protocol(d: Descriptor) -> Row:
    p = d.protocol
    return {
        "digest": d.protocol_digest,
        "name": p["metadata"]["name"],
        "title": p["metadata"]["title"],
        "metric": d.metric,
        "timed_pass": d.key.mode or "unspecified",
        "notes": p["spec"]["comparability"]["notes"],
        "document": _json(p),
    }


def _environment(d: Descriptor) -> Row:
    e = d.environment
    hw = e["spec"]["hardware"]
    return {
        "digest": d.environment_digest,
        "name": e["metadata"]["name"],
        "title": e["metadata"]["title"],
        "vendor": hw["vendor"],
        "product": hw["product"],
        "form_factor": hw.get("formFactor"),
        "architecture": hw["architecture"],
        "software": _json(e["spec"]["software"]),
        "document": _json(e),
    }


def _workload(d: Descriptor) -> Row:
    w = d.workload["spec"]
    return {
        "digest": d.workload_digest,
        "kernel": w["kernel"],
        "dtype": w["dtype"],
        "parameters": _json(w["parameters"]),
        "workload_slug": d.workload_slug,
        "catalog_version": d.catalog_version,
        "descriptor": d.workload_canonical,
    }


def _implementation(d: Descriptor) -> Row:
    i = d.implementation["spec"]
    return {
        "digest": d.implementation_digest,
        "provider": i["provider"],
        "kernel": i["kernel"],
        "liger_version": i["ligerVersion"],
        "descriptor": d.implementation_canonical,
    }


@dataclass(frozen=True)
class _Table:
    name: str
    schema: pa.Schema
    digest: Callable[[Descriptor], str]
    row: Callable[[Descriptor], Row]
    document: Callable[[Descriptor], dict[str, Any]] | None = None  # also a JSON document


_TABLES = (
    _Table(layout.PROTOCOLS, PROTOCOL_SCHEMA, lambda d: d.protocol_digest, _protocol,
           lambda d: d.protocol),
    _Table(layout.ENVIRONMENTS, ENVIRONMENT_SCHEMA, lambda d: d.environment_digest, _environment,
           lambda d: d.environment),
    _Table(layout.WORKLOADS, WORKLOAD_SCHEMA, lambda d: d.workload_digest, _workload),
    _Table(layout.IMPLEMENTATIONS, IMPLEMENTATION_SCHEMA, lambda d: d.implementation_digest,
           _implementation),
)  # fmt: skip


def descriptor_tables(
    workdir: Path, batch: str, descriptors: Iterable[Descriptor], known: set[str]
) -> tuple[set[str], list[WrittenFile]]:
    """Write the descriptors that `known` lacks; return their digests and the files."""
    new: dict[str, dict[str, Descriptor]] = {t.name: {} for t in _TABLES}
    for d in descriptors:
        for t in _TABLES:
            digest = t.digest(d)
            if digest not in known:
                new[t.name].setdefault(digest, d)
    files: list[WrittenFile] = []
    for t in _TABLES:
        found = new[t.name]
        if not found:
            continue
        ordered = [found[k] for k in sorted(found)]
        writer = ParquetTableWriter(workdir, layout.table_key(t.name, batch), t.schema)
        writer.write(pa.Table.from_pylist([t.row(d) for d in ordered], schema=t.schema))
        files.append(_closed(writer.close()))
    for t in _TABLES:
        if t.document is None or not new[t.name]:
            continue
        docs = [t.document(new[t.name][k]) for k in sorted(new[t.name])]
        jw = JsonLinesWriter(workdir, layout.documents_key(t.name, batch))
        jw.write_bytes("".join(_json(doc) + "\n" for doc in docs).encode(), len(docs))
        files.append(_closed(jw.close()))
    return {digest for found in new.values() for digest in found}, files


def _closed(written: WrittenFile | None) -> WrittenFile:
    assert written is not None  # a writer that was written to always yields its file
    return written
