"""Helpers for the warehouse tests: upstream objects, whole-warehouse snapshots, subprocesses.

Everything reads a warehouse the way an outside reader would (object keys and bytes), so a
comparison never goes through the code under test's own view of the log.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from kindex_etl.load import layout
from kindex_etl.load.delta import DOCUMENT_FILES
from kindex_etl.storage import ObjectStore, open_store
from tests.helpers import REPO, SEED_LINE

SAMPLE_ROWS = 2448
HEADER = ",".join(UPSTREAM_COLUMNS) + "\n"
SEED_ROW = SEED_LINE + "\n"

# Columns that legitimately differ between a local and an S3 run of the same data.
VOLATILE_COLUMNS = ("source_etag",)
_BATCH_IN_NAME = re.compile(r"part-[0-9a-f]{16}")


def synthetic_csv(
    versions: Iterable[str],
    *,
    hidden: Iterable[int] = (1024, 2048, 4096),
    providers: Iterable[str] = ("torch", "liger"),
    day: int = 10,
) -> bytes:
    """Upstream rows shaped like the seed row: one per (version, provider, H), all distinct."""
    lines = [HEADER]
    for v_i, version in enumerate(versions):
        for p_i, provider in enumerate(providers):
            for h in hidden:
                base = 0.1 + h / 1e5 + p_i / 100 + v_i / 1000
                lines.append(
                    f"megatron_rms_norm,{provider},full,speed,ms,H,hidden size,{h},"
                    f"{base:.6f},{base * 0.99:.6f},{base * 1.01:.6f},"
                    f'"{{""S"": 4096, ""B"": 1}}",NVIDIA H100 80GB HBM3,'
                    f"2026-06-{day:02d} 21:0{v_i % 10}:42,{version}\n"
                )
    return "".join(lines).encode()


# A local object's ETag is its size and mtime; a fixed mtime makes the same content the same
# version in any folder, as S3's MD5 ETags already are in any bucket.
FIXED_MTIME = 1_780_000_000


def put_objects(url: str, objects: Mapping[str, bytes]) -> ObjectStore:
    """Write upstream objects into a folder or bucket; returns the store."""
    store = open_store(url, create=True)
    for key, data in objects.items():
        store.put_bytes(key, data)
        path = store.local_path(key)
        if path is not None:
            os.utime(path, (FIXED_MTIME, FIXED_MTIME))
    return store


# -- reading a warehouse from outside -----------------------------------------------------------


def all_objects(url: str) -> dict[str, bytes]:
    store = open_store(url)
    return {info.key: store.get_bytes(info.key) for info in store.list()}


def data_objects(url: str) -> dict[str, bytes]:
    """Every object in the table folders (everything outside `_kindex/` and the report), with
    its bytes. The Delta logs and the document listing are left out: they record when they
    were published (commit times), so two identical ingests never write them byte for byte
    alike; `tests/load/test_delta_tables.py` checks them as readers do. The report
    (`reports/`) is rewritten by each regressions run, which follows an
    ingest through the flow (the CLI) and not through `kindex_etl.ingest`: no commit lists it."""
    return {
        k: v
        for k, v in all_objects(url).items()
        if not k.startswith((layout.CONTROL, layout.REPORTS, DOCUMENT_FILES + "/"))
        and "/_delta_log/" not in k
    }


def keys_under(url: str, prefix: str) -> set[str]:
    return {info.key for info in open_store(url).list(prefix)}


def log_records(url: str) -> list[dict[str, Any]]:
    store = open_store(url)
    return [
        json.loads(store.get_bytes(info.key))
        for info in store.list(layout.LOG)
        if info.key.endswith(".json")
    ]


def snapshot(url: str) -> dict[str, Any] | None:
    store = open_store(url)
    if store.head(layout.SNAPSHOT) is None:
        return None
    return json.loads(store.get_bytes(layout.SNAPSHOT))


def snapshot_keys(url: str) -> set[str]:
    snap = snapshot(url)
    return {k for keys in (snap or {}).get("tables", {}).values() for k in keys}


def committed_keys(records: Iterable[Mapping[str, Any]]) -> set[str]:
    return {f["key"] for r in records for f in r.get("files", [])}


def without_batch(key: str) -> str:
    return _BATCH_IN_NAME.sub("part-<batch>", key)


def decode_documents(data: bytes) -> list[dict[str, Any]]:
    with pa.CompressedInputStream(pa.BufferReader(data), "zstd") as stream:
        text = stream.read().decode()
    return [json.loads(line) for line in text.splitlines() if line]


def _doc_sort_key(doc: Mapping[str, Any]) -> str:
    external = doc.get("spec", {}).get("sourceNative", {}).get("externalId")
    return external or json.dumps(doc, sort_keys=True)


def documents(objects: Mapping[str, bytes]) -> dict[str, list[dict[str, Any]]]:
    """Every JSON document by table (`documents/<table>`), sorted by externalId or content."""
    out: dict[str, list[dict[str, Any]]] = {}
    for key, data in objects.items():
        if key.startswith("documents/") and key.endswith(".jsonl.zst"):
            out.setdefault(layout.table_of(key), []).extend(decode_documents(data))
    return {t: sorted(docs, key=_doc_sort_key) for t, docs in sorted(out.items())}


def tables(
    objects: Mapping[str, bytes], drop: Iterable[str] = VOLATILE_COLUMNS
) -> dict[str, pa.Table]:
    """Every Parquet table read back, minus `drop`, rows sorted by their natural key."""
    parts: dict[str, list[pa.Table]] = {}
    for key, data in objects.items():
        if key.endswith(".parquet"):
            parts.setdefault(layout.table_of(key), []).append(pq.read_table(io.BytesIO(data)))
    out = {}
    for table, tabs in sorted(parts.items()):
        t = pa.concat_tables(tabs, promote_options="permissive")
        t = t.drop_columns([c for c in drop if c in t.column_names])
        for sort_key in (
            ("external_id",),
            ("digest",),
            ("source_key", "source_row", "reason"),
            ("change_id", "warehouse_seq", "written_seq"),
            ("change_id", "warehouse_seq"),
        ):
            if all(c in t.column_names for c in sort_key):
                t = t.sort_by([(c, "ascending") for c in sort_key])
                break
        out[table] = t
    return out


def external_ids(objects: Mapping[str, bytes]) -> list[str]:
    runs = tables(objects).get(layout.RUNS)
    return [] if runs is None else runs.column("external_id").to_pylist()


def assert_unique(values: list[str]) -> None:
    counts = pc.value_counts(pa.array(values, pa.string()))
    dupes = [c["values"] for c in counts.to_pylist() if c["counts"] > 1]
    assert not dupes, f"duplicates: {dupes[:5]}"


def assert_same_files(got: Mapping[str, bytes], expected: Mapping[str, bytes]) -> None:
    """The same data files under the same keys: documents byte for byte, Parquet row for row.

    Parquet bytes of identical rows are not reproducible between processes (a few bytes of
    compressed pages differ), so Parquet files are compared by their rows and schema.
    """
    assert sorted(got) == sorted(expected)
    for key in sorted(expected):
        if key.endswith(".parquet"):
            a, b = pq.read_table(io.BytesIO(got[key])), pq.read_table(io.BytesIO(expected[key]))
            assert a.schema.equals(b.schema, check_metadata=True), key
            assert a.equals(b), key
        else:
            assert got[key] == expected[key], key


def assert_consistent(url: str) -> dict[str, Any]:
    """The invariants of a warehouse at rest (no writer running, none crashed).

    Nothing staged; the snapshot is at the log head and lists exactly the committed files;
    every committed file exists at its final key; no data file exists that no commit lists
    (outside `_kindex/`, only the report's pages are not data);
    every upstream object version is recorded once; external ids are unique.
    """
    records = log_records(url)
    seqs = sorted(r["seq"] for r in records)
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert keys_under(url, layout.STAGING) == set()
    # Left out of the data below, so held to what the report writes: pages and its one
    # shared script (Plotly's library), nothing else.
    pages = keys_under(url, layout.REPORTS)
    assert all(re.fullmatch(r"reports/([\w.-]+\.html|plotly-[\w.]+\.min\.js)", k) for k in pages), (
        pages
    )
    data = data_objects(url)
    committed = committed_keys(records)
    assert set(data) == committed
    snap = snapshot(url)
    if records:
        assert snap is not None and snap["seq"] == len(records)
        assert snapshot_keys(url) == committed
    versions = [(o["key"], o["etag"]) for r in records for o in r.get("objects", [])]
    assert len(versions) == len(set(versions)), versions
    assert_unique(external_ids(data))
    return {"records": records, "data": data}


# -- subprocesses -------------------------------------------------------------------------------

INGEST_SNIPPET = """
import os, sys, time
from kindex_etl import IngestOptions, ingest
# A start line for writers that must race: everything is imported, the ingest begins at once
# when the file KINDEX_TEST_GO_FILE exists, or when another writer has written the warehouse
# key KINDEX_TEST_GO_KEY (given up on after two minutes).
go = os.environ.get("KINDEX_TEST_GO_FILE")
while go and not os.path.exists(go):
    time.sleep(0.002)
if os.environ.get("KINDEX_TEST_GO_KEY"):
    from kindex_etl.storage import open_store
    store, until = open_store(sys.argv[2], create=True), time.monotonic() + 120
    while store.head(os.environ["KINDEX_TEST_GO_KEY"]) is None and time.monotonic() < until:
        time.sleep(0.01)
options = IngestOptions(trigger=False, **({} if sys.argv[3] == "0" else
                        {"max_objects_per_commit": int(sys.argv[3])}))
print(ingest(sys.argv[1], sys.argv[2], options).to_json())
"""


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test process's env (AWS_* point at moto) plus a private Prefect home, offline."""
    env = dict(os.environ)
    for name in ("KINDEX_FAULT_AT", "KINDEX_ORPHAN_GRACE_S"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    home = tmp_path / f"prefect-{len(list(tmp_path.glob('prefect-*')))}"
    home.mkdir(parents=True)
    env["PREFECT_HOME"] = str(home)
    env["DO_NOT_TRACK"] = "1"
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env.update(extra)
    return env


def ingest_cmd(upstream: str, warehouse: str, max_objects_per_commit: int = 0) -> list[str]:
    """`python -c` running pipeline.ingest directly (no Prefect): the commit protocol alone."""
    return [sys.executable, "-c", INGEST_SNIPPET, upstream, warehouse, str(max_objects_per_commit)]


def run_ingest(
    upstream: str,
    warehouse: str,
    env: Mapping[str, str],
    *,
    max_objects_per_commit: int = 0,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ingest_cmd(upstream, warehouse, max_objects_per_commit),
        env=dict(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def summary_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(lines[-1])
