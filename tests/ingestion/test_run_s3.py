"""The whole ingest with upstream and warehouse on S3 (moto's server on 127.0.0.1, reached
through boto3 and AWS_ENDPOINT_URL), checked against the same ingest on local folders."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.contracts.digests import digest
from kindex_etl.load import layout
from kindex_etl.storage import open_store
from tests.helpers import SAMPLE_CSV, golden_bundle
from tests.warehouse import (
    HEADER,
    REPO,
    SAMPLE_ROWS,
    SEED_ROW,
    assert_consistent,
    data_objects,
    documents,
    put_objects,
    tables,
    without_batch,
)

UPSTREAM_KEY = "benchmark/data/all_benchmark_data.csv"
# Present in run documents only as hashes of descriptors the seed does not publish (SPEC §2).
UNKNOWN_DIGESTS = ("workloadDigest", "implementationDigest")


def _ingest_both(
    tmp_path: Path, make_bucket: Callable[[], str], csv: bytes
) -> tuple[dict, dict, dict, dict]:
    """Ingest `csv` into local folders and into S3 (both URLs on S3, each under a prefix)."""
    local_up, local_wh = str(tmp_path / "upstream"), str(tmp_path / "warehouse")
    s3_up, s3_wh = f"s3://{make_bucket()}/liger", f"s3://{make_bucket()}/kindex/wh"
    put_objects(local_up, {UPSTREAM_KEY: csv})
    put_objects(s3_up, {UPSTREAM_KEY: csv})
    local = ingest(local_up, local_wh, IngestOptions(trigger=False)).as_dict()
    remote = ingest(s3_up, s3_wh, IngestOptions(trigger=False)).as_dict()
    return local, remote, data_objects(local_wh), data_objects(s3_wh)


def _assert_same_warehouse(local_objects: dict, s3_objects: dict) -> None:
    # The same files (batch ids in names may differ: they hash the upstream ETags)...
    assert sorted(map(without_batch, local_objects)) == sorted(map(without_batch, s3_objects))
    # ...the same documents, document for document...
    local_docs, s3_docs = documents(local_objects), documents(s3_objects)
    assert local_docs.keys() == s3_docs.keys()
    for table in local_docs:
        assert local_docs[table] == s3_docs[table], table
    # ...and the same rows in every table, except where the object's ETag is recorded.
    local_tables, s3_tables = tables(local_objects), tables(s3_objects)
    assert local_tables.keys() == s3_tables.keys()
    for table in local_tables:
        assert local_tables[table].equals(s3_tables[table]), table


def _summary_counts(summary: dict) -> dict:
    drop = {"upstream", "warehouse", "elapsed_s"}
    return {k: v for k, v in summary.items() if k not in drop}


def test_seed_row_on_s3_equals_local(tmp_path: Path, make_bucket: Callable[[], str]) -> None:
    local, remote, local_objects, s3_objects = _ingest_both(
        tmp_path, make_bucket, (HEADER + SEED_ROW).encode()
    )
    assert _summary_counts(local) == _summary_counts(remote)
    assert remote["runs_written"] == 1
    _assert_same_warehouse(local_objects, s3_objects)


def test_seed_row_golden_bundle_on_s3(tmp_path: Path, make_bucket: Callable[[], str]) -> None:
    golden = golden_bundle()
    up, wh = f"s3://{make_bucket()}", f"s3://{make_bucket()}/wh"
    put_objects(up, {UPSTREAM_KEY: (HEADER + SEED_ROW).encode()})
    ingest(up, wh, IngestOptions(trigger=False))
    assert_consistent(wh)
    docs = documents(data_objects(wh))
    [run] = docs["documents/benchmark_runs"]
    [protocol] = docs["documents/benchmark_protocols"]
    [environment] = docs["documents/execution_environments"]
    assert protocol == golden["protocol"]
    assert environment == golden["environment"]
    expected_spec = {k: v for k, v in golden["run"]["spec"].items() if k not in UNKNOWN_DIGESTS}
    assert {k: v for k, v in run["spec"].items() if k not in UNKNOWN_DIGESTS} == expected_spec
    assert {k: v for k, v in run.items() if k != "spec"} == {
        k: v for k, v in golden["run"].items() if k != "spec"
    }
    assert run["spec"]["protocolDigest"] == digest(protocol)
    assert run["spec"]["environmentDigest"] == digest(environment)
    # The two digests nobody can reproduce from the seed: recomputable from stored descriptors.
    data = tables(data_objects(wh))
    [workload] = data[layout.WORKLOADS].to_pylist()
    [implementation] = data[layout.IMPLEMENTATIONS].to_pylist()
    assert run["spec"]["workloadDigest"] == digest(json.loads(workload["descriptor"]))
    assert run["spec"]["implementationDigest"] == digest(json.loads(implementation["descriptor"]))


@pytest.mark.slow
def test_sample_on_s3_equals_local(tmp_path: Path, make_bucket: Callable[[], str]) -> None:
    csv = SAMPLE_CSV.read_bytes()
    local, remote, local_objects, s3_objects = _ingest_both(tmp_path, make_bucket, csv)
    assert _summary_counts(local) == _summary_counts(remote)
    assert remote["rows_read"] == SAMPLE_ROWS
    _assert_same_warehouse(local_objects, s3_objects)
    assert tables(s3_objects)[layout.RUNS].num_rows == remote["runs_written"]
    assert len(documents(s3_objects)["documents/benchmark_runs"]) == remote["runs_written"]


def test_s3_state_lives_in_the_warehouse(tmp_path: Path, make_bucket: Callable[[], str]) -> None:
    """A second run (another process could run it) learns what is done from the log alone;
    a changed object version (new ETag) is ingested again, its repeated rows are duplicates."""
    up, wh = f"s3://{make_bucket()}", f"s3://{make_bucket()}/wh"
    first = (HEADER + SEED_ROW).encode()
    put_objects(up, {UPSTREAM_KEY: first})
    ingest(up, wh, IngestOptions(trigger=False))
    again = ingest(up, wh, IngestOptions(trigger=False))
    assert (again.objects_skipped, again.commits, again.rows_read) == (1, [], 0)

    second_row = SEED_ROW.replace(",2048,", ",4096,")
    put_objects(up, {UPSTREAM_KEY: first + second_row.encode()})
    grown = ingest(up, wh, IngestOptions(trigger=False))
    assert (grown.objects_ingested, grown.rows_read) == (1, 2)
    assert (grown.runs_written, grown.duplicate_rows) == (1, 1)
    state = assert_consistent(wh)
    first_etag, second_etag = (o["etag"] for r in state["records"] for o in r["objects"])
    assert first_etag != second_etag == open_store(up).head(UPSTREAM_KEY).etag
    assert tables(state["data"])[layout.RUNS].num_rows == 2


_STREAM_PROBE = """
import resource, sys
import pyarrow as pa
from kindex_etl.extract.read import read_batches
from kindex_etl.storage import open_store
store = open_store(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rows = batches = 0
for rb in read_batches(store, sys.argv[2], block_size=1 << 20):
    rows += rb.batch.num_rows
    batches += 1
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(rows, batches, grown * 1024, pa.default_memory_pool().max_memory())
"""


@pytest.mark.slow
def test_large_csv_is_streamed_from_s3(tmp_path: Path, make_bucket: Callable[[], str]) -> None:
    """The CSV reader consumes S3Store.open_read's stream block by block: reading a 48 MiB
    object grows the reader's memory by far less than the object's size."""
    body = SEED_ROW.encode()
    copies = (48 << 20) // len(body)
    path = tmp_path / "big.csv"
    with path.open("wb") as fh:
        fh.write(HEADER.encode())
        for _ in range(copies // 4096):
            fh.write(body * 4096)
    size = path.stat().st_size
    up = f"s3://{make_bucket()}"
    open_store(up).put_file("big/benchmark.csv", path)
    probe = subprocess.run(
        [sys.executable, "-c", _STREAM_PROBE, up, "big/benchmark.csv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    rows, batches, grown, arrow_peak = map(int, probe.stdout.split())
    assert rows == copies // 4096 * 4096
    assert batches > 10
    assert grown < size / 3, (grown, size)
    assert arrow_peak < size / 3, (arrow_peak, size)
