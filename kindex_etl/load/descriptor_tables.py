"""Protocol, environment, workload and implementation tables: one row per new digest."""

from __future__ import annotations

import json
from collections.abc import Iterable
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


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def descriptor_tables(
    workdir: Path, batch: str, descriptors: Iterable[Descriptor], known: set[str]
) -> tuple[set[str], list[WrittenFile]]:
    """Write the descriptors that `known` lacks; return their digests and the files."""
    protocols: dict[str, dict[str, Any]] = {}
    environments: dict[str, dict[str, Any]] = {}
    workloads: dict[str, dict[str, Any]] = {}
    implementations: dict[str, dict[str, Any]] = {}
    proto_docs: dict[str, dict[str, Any]] = {}
    env_docs: dict[str, dict[str, Any]] = {}
    for d in descriptors:
        if d.protocol_digest not in known and d.protocol_digest not in protocols:
            p = d.protocol
            protocols[d.protocol_digest] = {
                "digest": d.protocol_digest,
                "name": p["metadata"]["name"],
                "title": p["metadata"]["title"],
                "metric": d.metric,
                "timed_pass": d.key.mode or "unspecified",
                "notes": p["spec"]["comparability"]["notes"],
                "document": _json(p),
            }
            proto_docs[d.protocol_digest] = p
        if d.environment_digest not in known and d.environment_digest not in environments:
            e = d.environment
            hw = e["spec"]["hardware"]
            environments[d.environment_digest] = {
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
            env_docs[d.environment_digest] = e
        if d.workload_digest not in known and d.workload_digest not in workloads:
            w = d.workload["spec"]
            workloads[d.workload_digest] = {
                "digest": d.workload_digest,
                "kernel": w["kernel"],
                "dtype": w["dtype"],
                "parameters": _json(w["parameters"]),
                "sweep_source": w["sweep"]["source"],
                "sweep_value": str(w["sweep"]["value"]),
                "workload_slug": d.workload_slug,
                "descriptor": d.workload_canonical,
            }
        if d.implementation_digest not in known and d.implementation_digest not in implementations:
            i = d.implementation["spec"]
            implementations[d.implementation_digest] = {
                "digest": d.implementation_digest,
                "provider": i["provider"],
                "kernel": i["kernel"],
                "liger_version": i["ligerVersion"],
                "descriptor": d.implementation_canonical,
            }

    files: list[WrittenFile] = []
    for table, rows, schema in (
        (layout.PROTOCOLS, protocols, PROTOCOL_SCHEMA),
        (layout.ENVIRONMENTS, environments, ENVIRONMENT_SCHEMA),
        (layout.WORKLOADS, workloads, WORKLOAD_SCHEMA),
        (layout.IMPLEMENTATIONS, implementations, IMPLEMENTATION_SCHEMA),
    ):
        if not rows:
            continue
        ordered = [rows[k] for k in sorted(rows)]
        writer = ParquetTableWriter(workdir, layout.table_key(table, batch), schema)
        writer.write(pa.Table.from_pylist(ordered, schema=schema))
        written = writer.close()
        assert written is not None
        files.append(written)
    for table, docs in ((layout.PROTOCOLS, proto_docs), (layout.ENVIRONMENTS, env_docs)):
        if not docs:
            continue
        jw = JsonLinesWriter(workdir, layout.documents_key(table, batch))
        payload = "".join(_json(docs[k]) + "\n" for k in sorted(docs)).encode()
        jw.write_bytes(payload, len(docs))
        written = jw.close()
        assert written is not None
        files.append(written)
    return set(protocols) | set(environments) | set(workloads) | set(implementations), files
