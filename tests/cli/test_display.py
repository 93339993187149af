"""Progress where the person is: a rich display on a terminal, one line per batch otherwise."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from tests.cli.conftest import kindex, many_rows_upstream


def test_progress_on_a_terminal_is_a_live_display(tmp_path, cli_env, warm_server):
    upstream = tmp_path / "up"
    many_rows_upstream(upstream, objects=2, rows=20_000)
    leader, follower = pty.openpty()
    env = {**cli_env, "TERM": "xterm-256color", "COLUMNS": "160"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kindex_etl.cli", "ingest", "--upstream", str(upstream),
         "--warehouse", str(tmp_path / "wh"), "--no-trigger"],
        env=env, stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(leader)
    screen = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, screen
    assert "\x1b[" in screen  # drawn with terminal control sequences: rich, not plain lines
    assert "2/2 objects" in screen and "40,000 rows" in screen and "rows/s" in screen
    assert "eta" in screen
    assert "kindex-etl: batch" not in screen  # the plain lines are for pipes


def test_progress_in_a_pipe_is_one_line_per_batch_and_quiet_is_silent(
    tmp_path, cli_env, warm_server
):
    upstream = tmp_path / "up"
    many_rows_upstream(upstream, objects=3, rows=1_000)
    done = kindex(
        cli_env, "backfill", "--upstream", str(upstream), "--warehouse", str(tmp_path / "wh"),
        "--objects-per-batch", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    batches = [line for line in done.stderr.splitlines() if line.startswith("kindex-etl: batch ")]
    assert [b.split(":")[1].strip() for b in batches] == ["batch 1/3", "batch 2/3", "batch 3/3"]
    assert "3/3 objects, 3,000 rows" in batches[-1] and "commit 3" in batches[-1]
    quiet = kindex(
        cli_env, "ingest", "-q", "--upstream", str(upstream), "--warehouse", str(tmp_path / "wh2"),
        "--json",
    )  # fmt: skip
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert '"runs_written": 3000' in quiet.stdout
