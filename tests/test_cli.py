"""The `kindex-etl` command as users run it: a subprocess, Prefect's real engine, no server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, seed_row, table, write_csv

SUMMARY_KEYS = {
    "objects_seen",
    "objects_ingested",
    "objects_skipped",
    "rows_read",
    "runs_written",
    "duplicate_rows",
    "quarantined_rows",
    "new_versions",
    "reruns_triggered",
}


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("prefect-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_"))}
    env.update(
        PREFECT_HOME=str(home),
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        KINDEX_OFFLINE="1",
        PYTHONPATH=str(REPO),
    )
    return env


def kindex(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kindex_etl.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_ingest_json_reports_one_object_on_stdout(tmp_path, cli_env):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    done = kindex(
        cli_env, "ingest", "--upstream", str(upstream), "--warehouse", str(warehouse), "--json"
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert set(summary) >= SUMMARY_KEYS
    assert summary["runs_written"] == 1 and summary["new_versions"] == ["0.8.0"]
    assert table(warehouse, "benchmark_runs").num_rows == 1
    again = kindex(
        cli_env, "ingest", "--upstream", str(upstream), "--warehouse", str(warehouse), "--json"
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["objects_skipped"] == 1


@pytest.mark.parametrize(
    ("upstream", "warehouse", "message"),
    [
        ("{tmp}/missing", "{tmp}/wh", "not a directory"),
        ("ftp://example/x", "{tmp}/wh", "unsupported URL scheme"),
        ("{tmp}/up", "{tmp}/file/wh", "cannot create"),
    ],
)
def test_ingest_fails_with_one_clear_line(tmp_path, cli_env, upstream, warehouse, message):
    (tmp_path / "up").mkdir()
    (tmp_path / "file").write_text("a file, not a folder")
    done = kindex(
        cli_env,
        "ingest",
        "--upstream",
        upstream.format(tmp=tmp_path),
        "--warehouse",
        warehouse.format(tmp=tmp_path),
        "--json",
    )
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kindex-etl: error:") and message in lines[0]


@pytest.mark.slow
def test_demo_runs_offline_and_answers_a_query(tmp_path, cli_env):
    done = kindex(cli_env, "demo", "--workdir", str(tmp_path / "demo"), "--offline")
    assert done.returncode == 0, done.stderr
    assert "generated sample (offline)" in done.stdout
    assert "median latency" in done.stdout and "megatron_rms_norm" in done.stdout
    assert table(tmp_path / "demo" / "warehouse", "benchmark_runs").num_rows > 0


def test_schema_export_writes_every_kind(tmp_path, cli_env):
    done = kindex(cli_env, "schema", "--out", str(tmp_path / "schemas"))
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in (tmp_path / "schemas").iterdir())
    assert names == [
        "BenchmarkProtocol.schema.json",
        "BenchmarkRun.schema.json",
        "ExecutionEnvironment.schema.json",
        "Implementation.schema.json",
        "Workload.schema.json",
    ]
    run = json.loads((tmp_path / "schemas" / "BenchmarkRun.schema.json").read_text())
    assert run["properties"]["kind"]["const"] == "BenchmarkRun"
