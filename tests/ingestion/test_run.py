"""The ingest on local folders: counts, ids, digests, readers, idempotency, bad input, replay."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from kindex_etl import IngestOptions, ingest, open_quarantine, replay
from kindex_etl.catalog import load_catalog
from kindex_etl.contracts.digests import canonical_json, digest
from kindex_etl.contracts.documents import BenchmarkProtocol, BenchmarkRun, ExecutionEnvironment
from kindex_etl.demo import lay_out_upstream, sample_rows
from tests.helpers import SAMPLE_CSV, documents, row, seed_row, table, tree_digest, write_csv

SPEED_ID = re.compile(r"^[a-z0-9_]+/[a-z]+/[a-z0-9_-]+/[a-z0-9-]+/[a-z0-9.+-]+/\d{4}(-\d{2}){5}$")
MEMORY_ID = re.compile(
    r"^[a-z0-9_]+/[a-z]+/[a-z0-9_-]+/[a-z0-9-]+/[a-z0-9.+-]+/memory/\d{4}(-\d{2}){5}$"
)


@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory) -> tuple[Path, Path, object]:
    root = tmp_path_factory.mktemp("sample")
    upstream = root / "up"
    (upstream / "benchmark" / "data").mkdir(parents=True)
    shutil.copy(SAMPLE_CSV, upstream / "benchmark" / "data" / "all_benchmark_data.csv")
    summary = ingest(str(upstream), str(root / "wh"))
    return upstream, root / "wh", summary


def test_sample_ingests_one_run_per_row_nothing_quarantined(sample_warehouse):
    _, warehouse, summary = sample_warehouse
    assert summary.rows_read == 2448
    assert summary.runs_written == 2448
    assert summary.quarantined_rows == 0 and summary.duplicate_rows == 0
    runs = table(warehouse, "benchmark_runs")
    assert runs.num_rows == 2448
    ids = runs.column("external_id").to_pylist()
    assert len(set(ids)) == 2448
    metrics = runs.column("metric").to_pylist()
    for external_id, metric in zip(ids, metrics, strict=True):
        assert (SPEED_ID if metric == "speed" else MEMORY_ID).match(external_id), external_id
    assert len(documents(warehouse, "benchmark_runs")) == 2448


def test_every_stored_digest_recomputes(sample_warehouse):
    _, warehouse, _ = sample_warehouse
    protocols = {digest(d): d for d in documents(warehouse, "benchmark_protocols")}
    environments = {digest(d): d for d in documents(warehouse, "execution_environments")}
    for name, docs in (
        ("benchmark_protocols", protocols),
        ("execution_environments", environments),
    ):
        rows = table(warehouse, name).to_pylist()
        assert {r["digest"] for r in rows} == set(docs)
        for r in rows:
            assert digest(json.loads(r["document"])) == r["digest"]
    for name in ("workloads", "implementations"):
        for r in table(warehouse, name).to_pylist():
            assert canonical_json(json.loads(r["descriptor"])).decode() == r["descriptor"]
            assert "sha256:" + hashlib.sha256(r["descriptor"].encode()).hexdigest() == r["digest"]
    runs = table(warehouse, "benchmark_runs").to_pylist()
    for r in runs:
        assert r["protocol_digest"] in protocols
        assert r["environment_digest"] in environments
        for column in ("workload", "implementation"):
            text = r[f"{column}_descriptor"]
            assert "sha256:" + hashlib.sha256(text.encode()).hexdigest() == r[f"{column}_digest"]
    for doc in documents(warehouse, "benchmark_runs"):
        BenchmarkRun.model_validate(doc)
        assert doc["spec"]["protocolDigest"] in protocols
    for doc in protocols.values():
        BenchmarkProtocol.model_validate(doc)
    for doc in environments.values():
        ExecutionEnvironment.model_validate(doc)


def test_parquet_reads_back_with_pyarrow_duckdb_and_pandas(sample_warehouse):
    _, warehouse, _ = sample_warehouse
    arrow = table(warehouse, "benchmark_runs")
    glob = str(warehouse / "benchmark_runs" / "**" / "*.parquet")
    con = duckdb.connect()
    n, distinct = con.execute(
        f"SELECT count(*), count(DISTINCT external_id) FROM read_parquet('{glob}')"
    ).fetchone()
    assert n == distinct == arrow.num_rows == 2448
    frame = pd.read_parquet(warehouse / "benchmark_runs")
    assert len(frame) == 2448
    assert str(frame["observed_at"].dtype) == "datetime64[ms, UTC]"
    # Each file stands alone: liger_version is a column, not only a folder name.
    one = next((warehouse / "benchmark_runs").rglob("*.parquet"))
    assert "liger_version" in pq.read_schema(one).names
    # A query a consumer would write: liger vs torch, same workload/GPU/pass, by digest.
    pairs = con.execute(
        f"""
        SELECT count(*) FROM read_parquet('{glob}') a JOIN read_parquet('{glob}') b
          USING (workload_digest, protocol_digest, environment_digest, observed_at)
        WHERE a.provider = 'liger' AND b.provider = 'torch'
        """
    ).fetchone()[0]
    assert pairs > 0


def test_runs_that_differ_only_in_provider_share_digests(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(
        upstream / "a.csv",
        [
            seed_row(),
            row(kernel_provider="liger"),
            row(liger_version="0.8.1", timestamp="2026-07-01 08:00:00"),
        ],
    )
    ingest(str(upstream), str(warehouse))
    runs = table(warehouse, "benchmark_runs").to_pylist()
    assert len(runs) == 3
    for column in ("workload_digest", "protocol_digest", "environment_digest"):
        assert len({r[column] for r in runs}) == 1
    assert len({r["implementation_digest"] for r in runs}) == 3


def test_second_ingest_changes_no_byte(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    lay_out_upstream(upstream, offline=True)
    first = ingest(str(upstream), str(warehouse))
    assert first.runs_written > 0
    before = tree_digest(warehouse)
    again = ingest(str(upstream), str(warehouse))
    assert again.objects_skipped == again.objects_seen and again.runs_written == 0
    assert tree_digest(warehouse) == before
    backfill = ingest(str(upstream), str(warehouse), IngestOptions(backfill=True))
    assert backfill.runs_written == 0 and backfill.duplicate_rows == backfill.rows_read
    assert tree_digest(warehouse) == before


def test_same_measurement_in_several_objects_is_one_run(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    origin = lay_out_upstream(upstream, offline=True)
    assert "generated" in origin
    commits = (upstream / "benchmarks" / "commits.txt").read_text().split()
    assert all((upstream / "benchmarks" / c / "benchmark.csv").exists() for c in commits)
    summary = ingest(str(upstream), str(warehouse))
    total = len(sample_rows())
    assert summary.objects_ingested == 3
    assert summary.runs_written == total
    assert summary.duplicate_rows == summary.rows_read - total
    assert table(warehouse, "benchmark_runs").num_rows == total


def test_bad_rows_and_files_are_set_aside_with_reasons(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    good = [seed_row(), row(kernel_provider="liger")]
    bad = [
        row(gpu_name="NVIDIA H1000 Imaginary"),
        row(timestamp="yesterday"),
        row(y_value_50="fast"),
        row(extra_benchmark_config_str="{not json"),
        row(liger_version="latest"),
        row(metric_name="energy", metric_unit="J"),
        row(kernel_name="../../etc"),
    ]
    path = write_csv(upstream / "benchmarks" / "abc1234" / "benchmark.csv", good + bad)
    with path.open("a") as fh:
        fh.write("too,few,fields\n")
    (upstream / "benchmarks" / "junk" / "benchmark.csv").parent.mkdir(parents=True)
    (upstream / "benchmarks" / "junk" / "benchmark.csv").write_text("name,value\nx,1\n")
    (upstream / "empty.csv").write_text("")
    summary = ingest(str(upstream), str(warehouse))
    assert summary.runs_written == 2
    assert summary.objects_rejected == 2
    assert summary.quarantined_by_reason == {
        "unknown_gpu": 1,
        "bad_timestamp": 1,
        "bad_value": 1,
        "bad_config": 1,
        "bad_version": 1,
        "unknown_metric": 1,
        "bad_identifier": 1,
        "malformed_row": 1,
        "bad_header": 2,  # a file rejected whole counts its lines (header and one row)
        "empty_file": 1,  # and at least one
    }
    assert summary.quarantined_rows == 11
    assert summary.rows_read == summary.runs_written + summary.quarantined_rows
    held = open_quarantine(str(warehouse)).to_pylist()
    assert len(held) == 10  # one entry per row, and one per rejected file
    by_reason = {r["reason"]: r for r in held}
    assert by_reason["unknown_gpu"]["source_key"] == "benchmarks/abc1234/benchmark.csv"
    assert by_reason["unknown_gpu"]["source_row"] == 4  # header is line 1
    assert by_reason["malformed_row"]["source_row"] == 11
    assert by_reason["unknown_gpu"]["gpu_name"] == "NVIDIA H1000 Imaginary"
    assert by_reason["bad_header"]["source_key"] == "benchmarks/junk/benchmark.csv"
    assert all(r["source_etag"] for r in held)


def test_conflicting_values_for_the_same_run_are_held_back(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "a.csv", [seed_row()])
    write_csv(upstream / "b.csv", [seed_row(), row(y_value_50="0.2")])
    summary = ingest(str(upstream), str(warehouse))
    assert summary.runs_written == 1
    assert summary.duplicate_rows == 1
    assert summary.quarantined_by_reason == {"conflicting_duplicate": 1}


def test_nan_points_are_failed_runs_not_dropped(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "a.csv", [row(y_value_50="nan", y_value_20="nan", y_value_80="nan")])
    summary = ingest(str(upstream), str(warehouse))
    assert summary.runs_written == 1
    [doc] = documents(warehouse, "benchmark_runs")
    assert doc["spec"]["status"] == "failed"
    assert "timing" not in doc["spec"] and doc["spec"]["measurements"] == []
    assert doc["spec"]["sourceNative"]["metrics"] == {"ms_20": None, "ms_50": None, "ms_80": None}
    [stored] = table(warehouse, "benchmark_runs").to_pylist()
    assert stored["status"] == "failed" and stored["value_median"] is None


def test_memory_runs_are_bytes_and_never_collide_with_speed(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    memory = row(
        metric_name="memory",
        metric_unit="MB",
        y_value_50="1536.5",
        y_value_20="1536.5",
        y_value_80="1537",
    )
    write_csv(upstream / "a.csv", [seed_row(), memory])
    ingest(str(upstream), str(warehouse))
    docs = {
        d["spec"]["sourceNative"]["externalId"]: d for d in documents(warehouse, "benchmark_runs")
    }
    assert len(docs) == 2
    mem = next(d for k, d in docs.items() if "/memory/" in k)
    assert mem["spec"]["memory"]["peakBytes"]["median"] == int(1536.5 * 1048576)
    assert mem["spec"]["measurements"][1] == {
        "metric": "peak_memory",
        "statistic": "p80",
        "unit": "bytes",
        "value": 1537 * 1048576,
    }
    assert mem["spec"]["sourceNative"]["metrics"]["mb_50"] == 1536.5
    protocols = {d["metadata"]["name"] for d in documents(warehouse, "benchmark_protocols")}
    assert protocols == {"liger-bench-do-bench-full", "liger-bench-peak-memory-full"}


def test_replay_after_catalog_update(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "a.csv", [seed_row(), row(gpu_name="NVIDIA Z9000 Prototype")])
    summary = ingest(str(upstream), str(warehouse))
    assert summary.quarantined_by_reason == {"unknown_gpu": 1}

    before = tree_digest(warehouse)
    unchanged = replay(str(warehouse))
    assert unchanged.runs_written == 0 and unchanged.quarantined_rows == 1
    assert unchanged.commits == []
    assert tree_digest(warehouse) == before  # no commit, no quarantine file: nothing changed
    assert len(open_quarantine(str(warehouse))) == 1

    catalog_dir = tmp_path / "catalog"
    catalog_dir.mkdir()
    gpus = json.loads((Path(load_catalog.__code__.co_filename).parent / "gpus.json").read_text())
    gpus["gpus"].append(
        {
            "match": "NVIDIA Z9000",
            "vendor": "nvidia",
            "product": "NVIDIA Z9000",
            "architecture": "sm_200",
            "family": "Future",
            "segment": "datacenter",
        }
    )
    (catalog_dir / "gpus.json").write_text(json.dumps(gpus))
    fixed = replay(str(warehouse), catalog=load_catalog(catalog_dir))
    assert fixed.runs_written == 1
    assert len(open_quarantine(str(warehouse))) == 0
    runs = table(warehouse, "benchmark_runs").to_pylist()
    z = next(r for r in runs if r["gpu_name"] == "NVIDIA Z9000 Prototype")
    assert z["gpu_architecture"] == "sm_200" and z["source_key"] == "a.csv"
    before = tree_digest(warehouse)
    assert replay(str(warehouse), catalog=load_catalog(catalog_dir)).runs_written == 0
    assert tree_digest(warehouse) == before


def test_unknown_kernel_is_normalized_and_flagged(tmp_path):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "a.csv", [row(kernel_name="brand_new_op", extra_benchmark_config_str="")])
    assert ingest(str(upstream), str(warehouse)).runs_written == 1
    [doc] = documents(warehouse, "benchmark_runs")
    assert doc["metadata"]["labels"]["kernelindex.dev/catalog"] == "unknown-kernel"
    assert doc["metadata"]["title"] == "brand_new_op · torch · full"
    assert doc["spec"]["sourceNative"]["externalId"].startswith("brand_new_op/full/torch/")


MAIN_5AE26C4 = Path(__file__).resolve().parents[1] / "fixtures" / "warehouse-main-5ae26c4"


def test_catalogued_variants_reach_the_runs_table(tmp_path):
    """The fixture's input, ingested now: dyt_beta rows are dyt runs, stamped and traceable."""
    upstream = tmp_path / "up"
    shutil.copytree(MAIN_5AE26C4 / "upstream", upstream)
    summary = ingest(str(upstream), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert summary.runs_written == 51
    assert summary.quarantined_by_reason == {"unknown_gpu": 1}
    runs = table(tmp_path / "wh", "benchmark_runs").to_pylist()
    dyt = [r for r in runs if r["kernel"] == "dyt"]
    assert len(dyt) == 10
    assert {r["source_kernel"] for r in dyt} == {"dyt_beta=True", "dyt_beta=False"}
    assert all(r["external_id"].startswith("dyt/") for r in dyt)
    assert {json.loads(r["workload_descriptor"])["spec"]["parameters"]["beta"] for r in dyt} == {
        True,
        False,
    }
    version = load_catalog().version
    assert {r["catalog_version"] for r in runs} == {version}
    assert all(r["source_kernel"] == r["kernel"] for r in runs if r["kernel"] != "dyt")
    variants = {r["kernel"]: r["workload_variant"] for r in runs}
    assert variants["jsd"] == "vocab-loss/BT-sweep-helper"
    workloads = table(tmp_path / "wh", "workloads").to_pylist()
    assert {w["catalog_version"] for w in workloads} == {version}
    docs = documents(tmp_path / "wh", "benchmark_runs")
    flagged = [d for d in docs if "kernelindex.dev/liger-version" in d["metadata"]["labels"]]
    # the sample's multi_token_attention rows say 0.1.1; that benchmark first shipped in 0.6.0
    assert len(flagged) == 2
    for d in flagged:
        assert d["spec"]["sourceNative"]["benchmark"].startswith("multi_token_attention/")
        assert d["metadata"]["labels"]["liger_version"] == "0.1.1"
        assert d["metadata"]["labels"]["kernelindex.dev/liger-version"] == (
            "predates-benchmark-0.6.0"
        )


def test_replay_releases_dyt_beta_rows_held_back_by_main_5ae26c4(tmp_path):
    warehouse = tmp_path / "wh"
    shutil.copytree(MAIN_5AE26C4 / "warehouse", warehouse)
    before = open_quarantine(str(warehouse)).to_pylist()
    assert {r["reason"] for r in before} == {"bad_identifier", "unknown_gpu"}
    summary = replay(str(warehouse))
    assert summary.runs_written == 10
    assert summary.quarantined_by_reason == {"unknown_gpu": 1}
    held = open_quarantine(str(warehouse)).to_pylist()
    assert [r["reason"] for r in held] == ["unknown_gpu"]
