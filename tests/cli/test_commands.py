"""The commands end to end on the shared local server: ingest's JSON, and the demo's truth."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

from tests.cli.conftest import kindex
from tests.helpers import seed_row, table, write_csv

SUMMARY_KEYS = {
    "objects_seen", "objects_ingested", "objects_skipped", "rows_read", "runs_written",
    "duplicate_rows", "quarantined_rows", "new_versions", "reruns_triggered", "commits",
}  # fmt: skip


def test_ingest_honours_kindex_settings_and_reports_json(tmp_path, cli_env, warm_server):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    env = {**cli_env, "KINDEX_UPSTREAM": str(upstream), "KINDEX_WAREHOUSE": str(warehouse)}
    done = kindex(env, "ingest", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert set(summary) >= SUMMARY_KEYS
    assert summary["runs_written"] == 1 and summary["new_versions"] == ["0.8.0"]
    assert table(warehouse, "benchmark_runs").num_rows == 1


def test_demo_tells_what_it_used_and_prints_a_query_that_gives_its_numbers(
    tmp_path, cli_env, warm_server
):
    done = kindex(cli_env, "demo", "--workdir", str(tmp_path / "demo"), "--offline")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "a generated sample (offline), not real measurements" in out
    assert "measured with liger 0.8.0 .. 0.8.1" in out
    report = re.search(r"report \(regressions, comparisons, plots\): open (file://\S+)", out)
    assert report, out
    index = Path(urllib.parse.urlparse(report.group(1)).path)
    assert index == (tmp_path / "demo" / "warehouse" / "reports" / "index.html").resolve()
    pages = {p.name for p in index.parent.rglob("*.html")} - {"index.html"}
    assert pages and all(name in index.read_text() for name in pages)  # one page per kernel
    header = re.search(
        r"^(\S+): liger against (\S+), .*liger (\S+) \(its newest release with both", out, re.M
    )
    assert header, out
    kernel, baseline, version = header.groups()
    assert version == "0.8.1" and baseline != "liger"
    shown = out.split("(its newest release with both):\n", 1)[1].split("\n\n", 1)[0]
    rows = [line.split() for line in shown.splitlines()[1:]]
    program = out.split("the same with DuckDB over the Delta table (copy it into Python):\n", 1)
    program = program[1].strip()
    assert f"kernel = '{kernel}'" in program and "DeltaTable(" in program
    printed: list[object] = []
    exec(program, {"print": printed.append})
    [got] = printed
    assert [(float(x), float(liger), float(base)) for x, liger, base, _ in rows] == got
    assert all(float(s) > 1 for *_, s in rows)  # the sample makes liger the faster one


def test_ingest_chains_the_regressions_flow_unless_told_not_to(tmp_path, cli_env, warm_server):
    upstream = tmp_path / "up"
    write_csv(upstream / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    for flag, report in (("--no-regressions", False), (None, True)):
        warehouse = tmp_path / f"wh-{report}"
        args = ["ingest", "--upstream", str(upstream), "--warehouse", str(warehouse), "--json"]
        done = kindex(cli_env, *args, *([flag] if flag else []))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["runs_written"] == 1
        assert (warehouse / "reports" / "index.html").exists() == report


def test_ingest_says_what_its_analysis_found_and_how_long_it_all_took(
    tmp_path, cli_env, warm_server
):
    """Issue 32: the chained analysis ran unannounced (no alert count, no report path) and
    "took 3.64 s" was said of a command that ran about 17 s."""
    import time

    from tests.analysis.helpers import series_rows

    step = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]
    upstream = tmp_path / "up"
    write_csv(upstream / "benchmarks" / "0001" / "benchmark.csv", series_rows(step))
    args = ["ingest", "--upstream", str(upstream), "--no-trigger"]
    start = time.monotonic()
    done = kindex(cli_env, *args, "--warehouse", str(tmp_path / "a"), "--json")
    wall = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    found = summary["analysis"]
    assert (found["changes"], found["alerts"], found["new_alerts"]) == (1, 1, 1)
    assert found["report"] == str(tmp_path / "a" / "reports" / "index.html")
    assert found["incremental"] is False  # a first ingest: every run new, a full analysis
    assert summary["elapsed_s"] >= summary["ingest_s"] + found["elapsed_s"]
    assert 0 < found["report_s"] < found["elapsed_s"]  # the report's share of the analysis
    assert wall - 3.0 < summary["elapsed_s"] <= wall  # all but the interpreter's start
    assert "looking for regressions" in done.stderr

    done = kindex(cli_env, *args, "--warehouse", str(tmp_path / "b"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2] == (
        "regressions: 1 changes, 1 alerts (1 new); "
        f"report: {tmp_path / 'b' / 'reports' / 'index.html'}"
    )
    assert lines[-1].startswith("took ") and "(ingest " in lines[-1] and "analysis " in lines[-1]
