"""Issue 54, "the analysis is owed until it is done": a stop during an ingest's chained
analysis, after its batch committed, used to lose that analysis for good (the same command
again said "nothing to do", the regressions table stayed empty, no report). The commands run
as users run them (a subprocess, the shared local Prefect server); the stop is a real SIGINT.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from kindex_etl.analysis.owed import owed_analysis
from kindex_etl.storage import open_store
from tests.analysis.helpers import series_rows
from tests.cli.conftest import flow_run_states, kindex
from tests.cli.test_stops import _wait_for
from tests.helpers import write_csv


def _upstream(root: Path) -> Path:
    """Three series over eight releases, each with a step (+10 %, +30 %, +30 %)."""
    groups = [
        series_rows([0.1] * 4 + [0.11] * 4),
        series_rows([0.1] * 4 + [0.13] * 4, x="4096"),
        series_rows([0.1] * 4 + [0.13] * 4, x="8192"),
    ]
    for i, rows in enumerate(groups):
        write_csv(root / f"benchmarks/{i:04d}/benchmark.csv", rows)
    return root


def test_a_stop_during_the_chained_analysis_then_the_same_command_completes_it(
    tmp_path: Path, cli_env: dict[str, str], warm_server: str
) -> None:
    up, wh = _upstream(tmp_path / "up"), tmp_path / "wh"
    command = ["ingest", "--upstream", str(up), "--warehouse", str(wh), "--no-trigger"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kindex_etl.cli", *command],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _wait_for(proc, "looking for regressions")  # the batch is committed; the analysis starts
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    # The stop came before the analysis finished (else this test would prove nothing).
    assert not (wh / "reports" / "index.html").exists()
    assert owed_analysis(open_store(str(wh), create=False)) is not None
    # Prefect's view is true: the ingest (and its regressions subflow, if it had begun) ended
    # Cancelled, none Running.
    states = flow_run_states(warm_server, wh)
    assert states["kindex-ingest"] == ["CANCELLED"]
    assert {s for runs in states.values() for s in runs} == {"CANCELLED"}, states

    again = kindex(cli_env, *command, "--json")
    assert again.returncode == 0, again.stderr
    assert "analysis" in again.stderr and "is owed" in again.stderr
    assert "nothing to do: answered without a flow run" not in again.stderr
    summary = json.loads(again.stdout)
    assert summary["runs_written"] == 0 and summary["analysis"]["alerts"] > 0

    # Complete: the report is there, and a full analysis finds nothing the table lacks.
    assert (wh / "reports" / "index.html").is_file()
    check = kindex(cli_env, "regressions", "--warehouse", str(wh), "--dry-run", "--json")
    assert check.returncode == 0, check.stderr
    full: dict[str, Any] = json.loads(check.stdout)
    assert full["alerts"] == summary["analysis"]["alerts"] and full["new_changes"] == 0
    assert owed_analysis(open_store(str(wh), create=False)) is None

    # Paid once: the next run has nothing to do again, and says so without a flow run.
    third = kindex(cli_env, *command)
    assert third.returncode == 0, third.stderr
    assert "nothing to do: answered without a flow run" in third.stderr


def test_no_regressions_leaves_the_analysis_owed_and_a_plain_ingest_pays_it(
    tmp_path: Path, cli_env: dict[str, str], warm_server: str
) -> None:
    up, wh = _upstream(tmp_path / "up"), tmp_path / "wh"
    command = ["ingest", "--upstream", str(up), "--warehouse", str(wh), "--no-trigger", "--json"]
    first = kindex(cli_env, *command, "--no-regressions")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["analysis"] is None
    skipped = kindex(cli_env, *command, "--no-regressions")  # the flag still means "not now"
    assert "nothing to do: answered without a flow run" in skipped.stderr
    paid = kindex(cli_env, *command)
    assert paid.returncode == 0, paid.stderr
    assert json.loads(paid.stdout)["analysis"]["alerts"] > 0
    assert (wh / "reports" / "index.html").is_file()


def test_what_is_owed_is_read_from_the_log_on_s3(tmp_path: Path, s3_bucket: str) -> None:
    """The mark is the ingest's own commit record, on S3 as on a folder; an analysis that
    finished (its record written after its commit and report) settles it."""
    from kindex_etl.analysis.run import run_regressions
    from kindex_etl.api import IngestOptions, ingest

    url = f"s3://{s3_bucket}/wh"
    ingest(str(_upstream(tmp_path / "up")), url, IngestOptions(trigger=False))
    store = open_store(url, create=False)
    owed = owed_analysis(store)
    assert owed is not None and owed.after_seq is None  # never analysed: in full
    run_regressions(url)
    assert owed_analysis(store) is None
    write_csv(tmp_path / "more/benchmarks/0009/benchmark.csv", series_rows([0.2] * 8, x="1"))
    ingest(str(tmp_path / "more"), url, IngestOptions(trigger=False))
    later = owed_analysis(store)
    assert later is not None and later.after_seq is not None and later.newest > later.after_seq
