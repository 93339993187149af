"""Every script in benchmarks/ runs, at a tiny size, as docs/performance.md tells a reader to run
it: a subprocess from the repository's root, offline, its own Prefect state. What each prints is
checked for the fields its figures are read from, so a benchmark that stops working, or stops
measuring what it says, fails here and not on the day someone needs its numbers.

benchmarks/eval/ has its own tests (tests/catalog/test_eval_*.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO

BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py"))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """No Prefect API, no AWS, no KINDEX_* of the caller's: a state folder of the module's own,
    whose local Prefect server (started by the first command that needs one) is stopped at
    the end."""
    state, home = tmp_path_factory.mktemp("state"), tmp_path_factory.mktemp("home")
    ours = ("PREFECT_", "AWS_", "KINDEX_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    clean.update(
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        KINDEX_OFFLINE="1",
        KINDEX_STATE_DIR=str(state),
        HOME=str(home),
        PYTHONPATH=str(REPO),
    )
    yield clean
    subprocess.run(
        [sys.executable, "-m", "kindex_etl.cli", "server", "stop"],
        env=clean,
        capture_output=True,
        timeout=60,
    )


def bench(env: dict[str, str], script: str, *args: str, timeout: float = 300) -> list[dict]:
    """Runs `python benchmarks/SCRIPT ARGS` and returns the JSON objects it printed."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def ingested(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`bench_ingest.py --keep`'s upstream and warehouse, which the other benchmarks start from."""
    work = tmp_path_factory.mktemp("bench-ingest")
    [result] = bench(
        env, "bench_ingest.py", "--rows", "3000", "--workdir", str(work), "--keep",
        "--duckdb-before", "1", "--duckdb-after", "1",
    )  # fmt: skip
    assert result["runs_written"] == 3000 and result["quarantined_rows"] == 0
    assert result["duckdb_seconds"] > 0 and result["ratio"] > 0 and result["chained_ratio"] > 0
    assert result["peak_rss_tree_mib"] >= result["peak_rss_ingest_mib"] > 0
    return work


def csv_of(work: Path) -> str:
    return str(work / "upstream" / "benchmark" / "data" / "all_benchmark_data.csv")


def test_every_script_has_a_smoke_test() -> None:
    here = Path(__file__).read_text(encoding="utf-8")
    untested = [s for s in SCRIPTS if f'"{s}"' not in here]
    assert not untested, f"no smoke test for {untested}"
    performance = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    unlisted = [s for s in SCRIPTS if f"`benchmarks/{s}`" not in performance]
    assert not unlisted, f"not named in docs/performance.md: {unlisted}"


def test_bench_ingest(ingested: Path) -> None:
    assert (ingested / "warehouse" / "benchmark_runs" / "_delta_log").is_dir()


def test_realistic(env: dict[str, str], tmp_path: Path) -> None:
    [diversity] = bench(env, "realistic.py", "--rows", "2000", "--out", str(tmp_path / "r.csv"))
    assert diversity["rows"] == 2000
    assert 0 < diversity["held_back_shaped"] < 2000 and diversity["shapes"] > 10


def test_ingest_memory(env: dict[str, str], ingested: Path, tmp_path: Path) -> None:
    [result] = bench(
        env, "ingest_memory.py", "--upstream", str(ingested / "upstream"),
        "--warehouse", str(tmp_path / "wh"),
    )  # fmt: skip
    assert result["runs_written"] == 3000 and result["peak_rss_mib"] > 0
    assert "MainThread" in result["thread_cpu_seconds"]


def test_ab_ingest(env: dict[str, str], ingested: Path) -> None:
    """The base revision is this checkout's HEAD, in a temporary git worktree."""
    results = bench(
        env, "ab_ingest.py", "--base", "HEAD", "--upstream", str(ingested / "upstream"),
        "--repeat", "1",
    )  # fmt: skip
    assert [r["tree"] for r in results] == ["HEAD", "checkout"]
    assert all(r["seconds"] > 0 and r["peak_rss_mib"] > 0 for r in results)


def test_bench_analysis(env: dict[str, str], ingested: Path) -> None:
    [result] = bench(env, "bench_analysis.py", "--warehouse", str(ingested / "warehouse"))
    assert result["runs"] == 3000 and result["series"] > 0
    assert result["analysis_seconds"] >= result["report_seconds"] > 0


def test_bench_hourly(env: dict[str, str], ingested: Path) -> None:
    [result] = bench(
        env, "bench_hourly.py", "--warehouse", str(ingested / "warehouse"),
        "--csv", csv_of(ingested), "--rows", "50",
    )  # fmt: skip
    assert result["runs_written"] == 50 and result["report_written"] is False
    assert result["wall_s"] > result["ingest_s"] > 0


def test_bench_upkeep(env: dict[str, str], ingested: Path, tmp_path: Path) -> None:
    [result] = bench(
        env, "bench_upkeep.py", "--warehouse", str(ingested / "warehouse"),
        "--csv", csv_of(ingested), "--hours", "2", "--rows", "50", "--workdir", str(tmp_path),
    )  # fmt: skip
    # Two hourly objects beside the bulk load: the compaction has small files to merge.
    assert result["compact"]["result"]["files_added"] > 0
    assert result["vacuum"]["seconds"] > 0


def test_bench_run_index(env: dict[str, str], tmp_path: Path) -> None:
    [result] = bench(
        env, "bench_run_index.py", "--rows", "3000", "--repeat", "1", "--workdir", str(tmp_path)
    )
    assert result["rows"] == 3000 and 0 < result["runs"] <= 3000
    assert result["with_index_s"] and result["without_index_s"]


def test_bench_year(env: dict[str, str], tmp_path: Path) -> None:
    *_, result = bench(
        env, "bench_year.py", "--store", "local", "--commits", "30", "--compact-every", "10",
        "--at", "20", "--workdir", str(tmp_path),
    )  # fmt: skip
    assert [m["warehouse_commits"] for m in result["marks"]] == [1, 20, 30]
    runs = [m["runs"] for m in result["marks"]]
    assert runs == sorted(runs) and runs[0] < runs[-1]


def test_bench_regressions(env: dict[str, str], tmp_path: Path) -> None:
    [result] = bench(
        env, "bench_regressions.py", "--series", "200", "--releases", "3",
        "--workdir", str(tmp_path / "br"),
    )  # fmt: skip
    assert result["aa_series"] > 0 and 0 <= result["aa_false_alarm_rate"] < 0.2
    assert set(result["per_step"]) == {"0.05", "0.10", "0.20", "0.50"}
    # A 50 % step is found far more often than a 5 % one.
    assert result["per_step"]["0.50"]["recall"] > result["per_step"]["0.05"]["recall"]


def test_bench_startup(env: dict[str, str], tmp_path: Path) -> None:
    """The no-op cases only (answered without Prefect); the others start servers of their own."""
    [result] = bench(
        env, "bench_startup.py", "--objects", "20", "--repeat", "1", "--workdir", str(tmp_path),
        "--cases", "noop_first", "noop_warm",
    )  # fmt: skip
    assert result["objects"] == 20 and set(result) >= {"noop_first_s", "noop_warm_s"}
    assert "work_first_s" not in result


def test_bench_backfill(env: dict[str, str], tmp_path: Path) -> None:
    """Sequential against an existing one-worker Dask cluster; the warehouses are compared."""
    *variants, result = bench(
        env, "bench_backfill.py", "--files", "2", "--rows-per-file", "50", "--repeat", "1",
        "--workers", "1", "--workdir", str(tmp_path), "--variants", "sequential", "dask_cluster",
    )  # fmt: skip
    assert [v["variant"] for v in variants] == ["sequential", "dask_cluster"]
    assert {v["runs_written"] for v in variants} == {100}
    assert result["rows"] == 100 and "speedup_dask_cluster" in result


def test_bench_month(env: dict[str, str], tmp_path: Path) -> None:
    """One day of four hours: hourly ingests, a crashed ingest and compaction, maintenance."""
    [result] = bench(
        env, "bench_month.py", "--days", "1", "--day-hours", "4", "--workdir", str(tmp_path)
    )
    assert result["hours"] == 4 and result["same_runs_as_one_clean_ingest"] is True
    assert len(result["maintenance_s"]) == 1 and result["startup_end_s"] > 0


def test_check_report(env: dict[str, str], tmp_path: Path) -> None:
    """On the report tests' real-history-shaped warehouse, which has changes to list. The 2 s
    budget a page has is for a quiet machine: here every check but the time is held."""
    from tests.report.history import history_warehouse

    warehouse = history_warehouse(tmp_path)
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "check_report.py"), "--warehouse", warehouse,
         "--budget-s", "60"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 with problems" in done.stdout
