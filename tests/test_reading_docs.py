"""docs/reading.md stays true: every Python block in it runs, in order, against a local warehouse
and the same warehouse on S3 (moto's server on 127.0.0.1), and what each query returns is
checked against the warehouse's files. Twice: at rest, and right after an ingest was killed in
the middle of a publish, where the doc promises that Delta readers still see the previous state
whole while a glob over the folder would see part of the newest batch. The offline DuckDB recipe
pins a DuckDB of its own: it runs in a virtual environment made for it."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.load import layout
from tests.docs_blocks import blocks, runnable
from tests.warehouse import (
    SEED_ROW,
    data_objects,
    documents,
    put_objects,
    run_ingest,
    snapshot_keys,
    subprocess_env,
    synthetic_csv,
    tables,
    without_batch,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "reading.md"
KEY_A = "benchmarks/aaaa111/benchmark.csv"
KEY_B = "benchmarks/bbbb222-v0.8.1/benchmark.csv"
CSV_A = synthetic_csv(["0.8.0"], day=1)
# A GPU the catalog cannot place: that row is held back (quarantine), not guessed.
UNKNOWN_GPU_ROW = SEED_ROW.replace("NVIDIA H100 80GB HBM3", "NVIDIA Mystery X1")
CSV_B = synthetic_csv(["0.8.0", "0.8.1"], day=2) + UNKNOWN_GPU_ROW.encode()


def _blocks() -> list[str]:
    return runnable(DOC, "python")


def _build(scenario: str, root: Path, bucket: str, s3_client: Any) -> tuple[str, str]:
    """The same warehouse twice: a local folder and `s3://bucket/wh`."""
    s3_client.create_bucket(Bucket=bucket)
    pairs = [(str(root / "up"), str(root / "wh")), (f"s3://{bucket}/up", f"s3://{bucket}/wh")]
    for up, wh in pairs:
        put_objects(up, {KEY_A: CSV_A})
        ingest(up, wh, IngestOptions(trigger=False))
        put_objects(up, {KEY_B: CSV_B})
        if scenario == "at-rest":
            ingest(up, wh, IngestOptions(trigger=False))
        else:
            env = subprocess_env(root, KINDEX_FAULT_AT="mid_publish")
            crashed = run_ingest(up, wh, env)
            assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    return pairs[0][1], pairs[1][1]


@pytest.fixture(scope="module", params=["at-rest", "crashed-mid-publish"])
def warehouses(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, str]:
    s3_client = request.getfixturevalue("s3_client")
    root = tmp_path_factory.mktemp(request.param)
    bucket = f"kindex-docs-{uuid.uuid4().hex[:16]}"
    local, remote = _build(request.param, root, bucket, s3_client)
    return request.param, local, remote


def _run_doc(local: str, bucket: str, prefix: str) -> dict[str, Any]:
    setup, *rest = _blocks()
    assert "WAREHOUSE =" in setup and "BUCKET, PREFIX =" in setup
    ns: dict[str, Any] = {"__name__": "reading_doc"}
    exec(compile(setup, "docs/reading.md#setup", "exec"), ns)
    ns.update(WAREHOUSE=local, BUCKET=bucket, PREFIX=prefix)
    for i, block in enumerate(rest, 1):
        exec(compile(block, f"docs/reading.md#block{i}", "exec"), ns)
    return ns


def _ids(table: Any) -> list[str]:
    return [] if table is None else sorted(table.column("external_id").to_pylist())


def test_doc_has_blocks() -> None:
    blocks = _blocks()
    assert len(blocks) >= 8
    for name in ("DeltaTable(", "duckdb", "pl.scan_delta", "to_pandas", "document_files"):
        assert any(name in b for b in blocks), name
    # No block reads a table folder with a bare glob: that is what the doc warns against.
    assert not any("read_parquet(" in b or "ds.dataset(" in b for b in blocks)


@pytest.mark.slow
def test_every_query_in_the_doc(warehouses: tuple[str, str, str]) -> None:
    scenario, local, remote = warehouses
    bucket, prefix = remote.removeprefix("s3://").split("/", 1)
    ns = _run_doc(local, bucket, prefix)

    # What is in the table folders (the layout) and what the published state lists.
    in_folders = data_objects(local)
    in_snapshot = {k: in_folders[k] for k in snapshot_keys(local)}
    assert sorted(map(without_batch, snapshot_keys(local))) == sorted(
        map(without_batch, snapshot_keys(remote))
    )
    layout_runs = tables(in_folders)[layout.RUNS]
    snap_runs = tables(in_snapshot)[layout.RUNS]
    layout_ids, snap_ids = _ids(layout_runs), _ids(snap_runs)
    assert len(set(layout_ids)) == len(layout_ids)
    if scenario == "at-rest":
        assert layout_ids == snap_ids
    else:
        # The publish window: a glob would see part of the crashed batch; Delta readers see
        # the previous state (the first ingest) whole.
        assert set(snap_ids) < set(layout_ids)

    # Every Delta reader, local and S3, returns exactly the published runs.
    delta_reads = {
        "pyarrow": ns["runs"].column("external_id").to_pylist(),
        "pyarrow-s3": ns["runs_s3"].column("external_id").to_pylist(),
        "polars": ns["runs_pl"]["external_id"].to_list(),
        "polars-s3": ns["runs_pl_s3"]["external_id"].to_list(),
        "pandas": list(ns["df"]["external_id"]),
    }
    for name, ids in delta_reads.items():
        assert sorted(ids) == snap_ids, name
    assert ns["runs_seq"] == (2 if scenario == "at-rest" else 1)
    assert set(ns["runs_080"].column("liger_version").to_pylist()) == {"0.8.0"}
    versions = snap_runs.column("liger_version").to_pylist()
    assert ns["runs_080"].num_rows == versions.count("0.8.0")
    assert set(ns["df"]["release"].astype(str)) == set(ns["df"]["liger_version"])
    assert sorted(ns["df_s3"]["external_id"]) == snap_ids  # all speed runs here

    # Documents: through document_files they match the published runs, one for one.
    def doc_ids(docs: list[dict[str, Any]]) -> list[str]:
        return sorted(d["spec"]["sourceNative"]["externalId"] for d in docs)

    assert doc_ids(ns["run_docs"]) == doc_ids(ns["run_docs_s3"]) == snap_ids
    snap_docs = documents(in_snapshot)["documents/benchmark_runs"]

    # DuckDB.
    assert ns["runs_per_gpu"] == ns["runs_per_gpu_s3"]
    metrics = snap_runs.column("metric").to_pylist()
    assert sum(row[2] for row in ns["runs_per_gpu"]) == metrics.count("speed") == len(snap_ids)
    assert [row[0] for row in ns["runs_joined"]] == snap_ids
    assert all(row[2] == "NVIDIA H100" and row[3] == "sm_90" for row in ns["runs_joined"])
    assert ns["doc_medians"] == sorted(
        (d["spec"]["sourceNative"]["externalId"], d["spec"]["timing"]["latencyNs"]["median"])
        for d in snap_docs
    )

    # Held-back rows: the unknown GPU's row, once its batch is published.
    held = ns["held_back_s3"]
    if scenario == "at-rest":
        assert held is not None and held.num_rows == 1
        [row] = held.to_pylist()
        assert (row["source_key"], row["source_row"]) == (KEY_B, CSV_B.count(b"\n"))
        assert row["reason"] == "unknown_gpu" and "NVIDIA Mystery X1" in row["detail"]
    else:
        assert held is None


def test_offline_duckdb_recipe_runs_as_written(tmp_path: Path) -> None:
    """Issue 54: `duckdb_ext.get_extension_dir` did not exist. The recipe runs here as the doc
    says, in a fresh virtual environment with exactly the packages it names (from the package
    index, as CI's own install), DuckDB told never to download: the delta extension must come
    from the package."""
    [recipe] = [b for b in blocks(DOC) if b.requires]
    wh = tmp_path / "wh"
    put_objects(str(tmp_path / "up"), {KEY_A: CSV_A})
    ingest(str(tmp_path / "up"), str(wh), IngestOptions(trigger=False))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    pip = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *recipe.requires],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [python, "-c", f"WAREHOUSE = {str(wh)!r}\n" + recipe.text],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = ast.literal_eval(done.stdout.strip())
    versions = tables(data_objects(str(wh)))[layout.RUNS].column("liger_version").to_pylist()
    assert got == [(v, versions.count(v)) for v in sorted(set(versions))]
