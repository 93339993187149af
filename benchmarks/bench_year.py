"""A year of hourly commits: files per table, ingest start-up and a query, with compaction.

    python benchmarks/bench_year.py --store local [--commits 8760] [--rows 100] [--workdir DIR]
    python benchmarks/bench_year.py --store s3    (moto's server on 127.0.0.1, in this process)

Commit 1 is a real ingest of the upstream sample. Commits 2..N are hourly commits of `--rows`
runs each, written through the warehouse's own commit protocol (stage, conditional commit,
publish, snapshot compare-and-swap, checkpoints every KINDEX_CHECKPOINT_INTERVAL): the rows are
the sample's normalized runs, cycled, with timestamps, external ids and documents shifted by
the hour, and every commit records its own upstream object, so the log, the done-object map
and the file count grow as an hourly schedule makes them grow. (Real ingests of tiny files
cost ~0.2 s each here, mostly the local store's path checks: a real year would take half an
hour of this machine; the commits themselves are what this measures.) Every `--compact-every`
commits, compaction runs as the daily deployment would, then vacuum (retention 0 s: the
simulated year passes in minutes).

At commits 1, 1000 and N (and `--at`), from cold process caches: a real `ingest()` of one new
hourly object (`ingest_s`: refresh from the newest checkpoint, recover, plan, run index,
normalize, commit), `refresh_s` (opening the warehouse state alone), a DuckDB query over the
snapshot's files (`query_s`), and the files per table in the snapshot and in the folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.realistic import sample_csv  # noqa: E402

SAMPLE = sample_csv()

QUERY = """
SELECT kernel, provider, count(*) AS runs, median(value_median) AS median_ns
FROM runs WHERE metric = 'speed' GROUP BY ALL ORDER BY ALL
"""
_ID_TS = re.compile(r"\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}$")


def _start_moto() -> Any:
    import logging
    import socket

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
    )
    import boto3

    boto3.client("s3").create_bucket(Bucket="year")
    return server


class Template:
    """The sample's runs and run documents, normalized once by the real pipeline."""

    def __init__(self, warehouse: str) -> None:
        from kindex_etl.load import layout
        from kindex_etl.load.warehouse import open_warehouse

        wh = open_warehouse(warehouse)
        wh.refresh()
        runs = wh.read_table(layout.RUNS)
        assert runs is not None
        docs: dict[str, str] = {}
        for key in wh.files(f"documents/{layout.RUNS}"):
            data = wh.store.get_bytes(key)
            with pa.CompressedInputStream(pa.BufferReader(data), "zstd") as stream:
                for line in stream.read().decode().splitlines():
                    doc = json.loads(line)
                    docs[doc["spec"]["sourceNative"]["externalId"]] = line
        self.runs = runs
        self.ids = runs.column("external_id").to_pylist()
        self.observed = runs.column("observed_at").to_pylist()
        self.docs = [docs[i] for i in self.ids]


def hourly_commit(warehouse: Any, template: Template, hour: int, rows: int, workdir: Path) -> int:
    """One hour's runs as one commit, through the warehouse's commit protocol."""
    from kindex_etl.contracts.tables import RUN_WRITE_SCHEMA
    from kindex_etl.load import layout
    from kindex_etl.load.record import CommitRecord, Counts, FileEntry, ObjectEntry
    from kindex_etl.load.writers import JsonLinesWriter, ParquetTableWriter

    n = template.runs.num_rows
    idx = [(hour * rows + i) % n for i in range(rows)]
    # A distinct shift per pass over the template, so no two hours write the same run.
    shift = timedelta(hours=hour)
    part = template.runs.take(pa.array(idx))
    ids, docs = [], []
    for i in idx:
        old = template.observed[i]
        new = old + shift
        old_s, new_s = old.strftime("%Y-%m-%d-%H-%M-%S"), new.strftime("%Y-%m-%d-%H-%M-%S")
        ids.append(_ID_TS.sub(new_s, template.ids[i]))
        old_iso = old.strftime("%Y-%m-%dT%H:%M:%S")
        new_iso = new.strftime("%Y-%m-%dT%H:%M:%S")
        docs.append(template.docs[i].replace(old_s, new_s).replace(old_iso, new_iso) + "\n")
    part = part.set_column(part.schema.get_field_index("external_id"), "external_id", pa.array(ids))
    observed = pc.add(part.column("observed_at"), pa.scalar(shift, pa.duration("ms")))
    part = part.set_column(part.schema.get_field_index("observed_at"), "observed_at", observed)
    batch = f"{hour:016x}"
    files = []
    by_version = part.group_by("liger_version").aggregate([]).column(0).to_pylist()
    for version in by_version:
        rows_v = part.filter(pc.equal(part.column("liger_version"), version))
        w = ParquetTableWriter(workdir, layout.runs_key(batch, version, 0), RUN_WRITE_SCHEMA)
        w.write(rows_v)
        files.append(w.close())
    jw = JsonLinesWriter(workdir, layout.documents_key(layout.RUNS, batch))
    jw.write_lines(pa.array(docs))
    files.append(jw.close())
    for f in files:
        assert f is not None
        warehouse.stage(batch, f.key, f.path)
    record = CommitRecord(
        batch=batch,
        objects=[
            ObjectEntry(
                key=f"benchmarks/h{hour:05d}/benchmark.csv", etag=f"e{hour}", rows=rows, runs=rows
            )
        ],
        files=[FileEntry(key=f.key, rows=f.rows) for f in files if f is not None],
        versions=sorted(by_version),
        counts=Counts(rows=rows, runs=rows),
    )
    seq = int(warehouse.commit(record))
    warehouse.publish(record)
    warehouse.update_snapshot()
    return seq


def _snapshot(url: str) -> dict[str, Any]:
    from kindex_etl.load import layout
    from kindex_etl.storage import open_store

    data: dict[str, Any] = json.loads(open_store(url).get_bytes(layout.SNAPSHOT))
    return data


def query_seconds(url: str) -> tuple[float, int]:
    """The benchmark's query as a reader runs it: DuckDB over the runs' Delta table."""
    import duckdb
    from deltalake import DeltaTable

    from kindex_etl.load import delta
    from kindex_etl.storage import open_store

    start = time.perf_counter()
    options = delta.storage_options(open_store(url))
    table = DeltaTable(f"{url.rstrip('/')}/benchmark_runs", storage_options=options)
    con = duckdb.connect()
    con.register("runs", table.to_pyarrow_dataset())
    rows = con.sql(QUERY).fetchall()
    total = sum(r[2] for r in rows)
    return time.perf_counter() - start, total


def measure(url: str, upstream: Path, head: int, rows_csv: bytes) -> dict[str, Any]:
    from kindex_etl import IngestOptions, ingest
    from kindex_etl.ingestion import run as run_module
    from kindex_etl.load import layout
    from kindex_etl.load.warehouse import open_warehouse
    from kindex_etl.storage import open_store

    run_module._ingestor = None  # a new process: no cached state
    start = time.perf_counter()
    wh = open_warehouse(url)
    wh.refresh()
    _ = wh.state
    refresh_s = time.perf_counter() - start
    read_records = len(wh.records)

    (upstream / f"m{head:05d}").mkdir(parents=True, exist_ok=True)
    (upstream / f"m{head:05d}" / "benchmark.csv").write_bytes(rows_csv)
    run_module._ingestor = None
    start = time.perf_counter()
    summary = ingest(str(upstream), url, IngestOptions(trigger=False, prefix=f"m{head:05d}/"))
    ingest_s = time.perf_counter() - start
    assert summary.runs_written > 0, summary.as_dict()
    query_s, runs = query_seconds(url)
    snap = _snapshot(url)
    store = open_store(url)
    in_folder: dict[str, int] = {}
    delta_log_files = 0
    for info in store.list():
        if "/_delta_log/" in info.key or info.key.startswith("document_files/"):
            delta_log_files += 1
        elif not info.key.startswith(layout.CONTROL):
            t = layout.table_of(info.key)
            in_folder[t] = in_folder.get(t, 0) + 1
    return {
        "warehouse_commits": head,
        "ingest_s": round(ingest_s, 3),
        "refresh_s": round(refresh_s, 4),
        "records_read_at_start": read_records,
        "query_s": round(query_s, 3),
        "runs": runs,
        "snapshot_files": {t: len(k) for t, k in sorted(snap["tables"].items())},
        "folder_files": dict(sorted(in_folder.items())),
        "delta_log_files": delta_log_files,
    }


def _probe_csv(hour: int) -> bytes:
    """A small new upstream object for the measuring ingest (distinct runs at each mark)."""
    lines = [SAMPLE.read_text().splitlines()[0]]
    when = (datetime(2027, 1, 1, tzinfo=UTC) + timedelta(hours=hour)).strftime("%Y-%m-%d %H:%M:%S")
    for h in (1024, 2048, 4096):
        for provider in ("torch", "liger"):
            lines.append(
                f"megatron_rms_norm,{provider},full,speed,ms,H,hidden size,{h},0.1,0.09,0.11,"
                f'"{{""S"": 4096, ""B"": 1}}",NVIDIA H100 80GB HBM3,{when},0.8.0'
            )
    return ("\n".join(lines) + "\n").encode()


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kindex_etl import IngestOptions, ingest
    from kindex_etl.load.warehouse import open_warehouse
    from kindex_etl.maintenance import compact, vacuum

    root = Path(args.workdir)
    shutil.rmtree(root, ignore_errors=True)
    (root / "up" / "benchmark" / "data").mkdir(parents=True)
    shutil.copy(SAMPLE, root / "up" / "benchmark" / "data" / "all_benchmark_data.csv")
    url = str(root / "wh") if args.store == "local" else "s3://year/wh"
    # A mark m: an ingest of one new object into a warehouse of (at least) m commits.
    marks = sorted({1, 1000, args.commits, *args.at})
    out: dict[str, Any] = {"store": args.store, "commits": args.commits, "rows": args.rows,
                           "compact_every": args.compact_every, "marks": []}  # fmt: skip
    started = time.perf_counter()
    first = ingest(str(root / "up"), url, IngestOptions(trigger=False))
    assert first.commits == [1]
    template = Template(url)
    warehouse = open_warehouse(url)
    warehouse.refresh()
    hour = 1
    work = Path(tempfile.mkdtemp(prefix="kindex-year-", dir=args.workdir))
    compactions = 0
    pending = list(marks)
    while True:
        head = warehouse.head
        if pending and head >= pending[0]:
            pending.pop(0)
            out["marks"].append(measure(url, root / "up", head, _probe_csv(head)))
            print(json.dumps(out["marks"][-1]), flush=True)
            warehouse.refresh()
            continue
        if head >= args.commits:
            break
        if hour % args.compact_every == 0:
            result = compact(url, orphan_grace=timedelta(hours=1))
            vacuum(url, retention=timedelta(0))
            compactions += result.commit is not None
            warehouse.refresh()
        hourly_commit(warehouse, template, hour, args.rows, work)
        hour += 1
        if hour % 1000 == 0:
            print(f"commit {warehouse.head}, {time.perf_counter() - started:.0f} s", flush=True)
    out["compactions"] = compactions
    out["total_s"] = round(time.perf_counter() - started, 1)
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--commits", type=int, default=8760)
    parser.add_argument("--rows", type=int, default=100, help="runs per hourly commit")
    parser.add_argument("--compact-every", type=int, default=24)
    parser.add_argument("--at", type=int, nargs="*", default=[], help="more commits to measure")
    parser.add_argument("--workdir", default="/tmp/kindex-year")
    args = parser.parse_args()
    os.environ.setdefault("DO_NOT_TRACK", "1")
    server = _start_moto() if args.store == "s3" else None
    try:
        print(json.dumps(run(args)))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
