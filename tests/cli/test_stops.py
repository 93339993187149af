"""Ctrl-C and SIGTERM mid-ingest: out within 5 s, one line, 130 / 143; a re-run completes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.conftest import flow_run_states, kindex, many_rows_upstream
from tests.helpers import table


def _start(env, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "kindex_etl.cli", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for(proc, text: str, timeout: float = 120) -> list[str]:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never appeared: {seen}")


@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped (SIGTERM)")],
)
def test_a_stop_mid_ingest_is_quick_clean_and_a_rerun_completes(
    tmp_path, cli_env, warm_server, sig, code, word
):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    total = many_rows_upstream(upstream, objects=6, rows=40_000)
    proc = _start(
        cli_env, "backfill", "--upstream", str(upstream), "--warehouse", str(warehouse),
        "--objects-per-batch", "1",
    )  # fmt: skip
    _wait_for(proc, "batch 1/6")  # one commit is in: a stop must keep it
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert proc.returncode == code
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"kindex-etl: {word}: ")
    assert "run the same command again to continue" in last
    committed = table(warehouse, "benchmark_runs").num_rows
    assert 0 < committed < total
    assert f"{committed:,} runs" in last
    # Issue 54: Prefect showed the stopped run as Running for good.
    assert flow_run_states(warm_server, warehouse) == {"kindex-backfill": ["CANCELLED"]}
    again = kindex(
        cli_env, "ingest", "--upstream", str(upstream), "--warehouse", str(warehouse), "--json",
        "--no-trigger",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["runs_written"] == total - committed and summary["objects_skipped"] >= 1
    assert table(warehouse, "benchmark_runs").num_rows == total


def test_a_stop_right_after_a_maintenance_commit_says_it_was_made(tmp_path, monkeypatch):
    """Issue 32: a stop of a command with no ingest batches said "nothing was committed",
    whatever it had committed. The line a stop prints, taken at the moment compaction's commit
    is published (what the signal handler prints, without ending this process)."""
    import kindex_etl.maintenance.compaction as compaction
    from kindex_etl.cli import main, stops
    from tests.maintenance import hourly_upstream, ingest_hourly

    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    lines: list[str] = []

    def at(point: str) -> None:
        if point in ("compact_after_stage", "compact_after_publish"):
            lines.append(stops._line(signal.SIGINT))

    monkeypatch.setattr(compaction, "fault_point", at)
    assert main(["compact", "--warehouse", wh, "-q"]) == 0
    assert lines == [
        "kindex-etl: interrupted: nothing was committed; run the same command again to continue",
        "kindex-etl: interrupted: the warehouse moved from commit 3 to 4 (commit 4, each whole); "
        "run the same command again to continue",
    ]


def test_a_killed_commands_flow_run_is_crashed_by_the_next_command(tmp_path, cli_env, warm_server):
    """Issue 54: a kill cannot say anything, and its run stayed Running in Prefect. The next
    command that starts Prefect marks it Crashed (the killed command's ledger of its runs)."""
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    many_rows_upstream(upstream, objects=6, rows=40_000)
    proc = _start(
        cli_env, "backfill", "--upstream", str(upstream), "--warehouse", str(warehouse),
        "--objects-per-batch", "1",
    )  # fmt: skip
    _wait_for(proc, "batch 1/6")
    proc.kill()
    proc.communicate(timeout=30)
    assert flow_run_states(warm_server, warehouse) == {"kindex-backfill": ["RUNNING"]}
    again = kindex(
        cli_env, "ingest", "--upstream", str(upstream), "--warehouse", str(warehouse),
        "--no-trigger", "--no-regressions",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert flow_run_states(warm_server, warehouse) == {
        "kindex-backfill": ["CRASHED"],
        "kindex-ingest": ["COMPLETED"],
    }
