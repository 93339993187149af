"""Issue 32: a stop at any point of an ingest says what is committed (Prefect's real engine).

The line is taken where the signal handler would print it: a stop asked for while a commit is
being made visible runs right after the commit's shield (`progress.stop_when_safe`).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.analysis.helpers import series_rows
from tests.helpers import write_csv

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_a_stop_during_the_first_commit_says_it_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It printed "nothing was committed" while commit 1 was published: the flow counted the
    batch only after the shield, and the stop ran first."""
    import kindex_etl.ingestion.commit as commit
    from flows.ingest import run_ingest_flow
    from kindex_etl.cli import stops
    from kindex_etl.ingestion import progress, run

    up = tmp_path / "up"
    for i in range(2):
        write_csv(up / f"benchmarks/{i:04d}/benchmark.csv", series_rows([0.1] * 8, day=1 + i))
    batches = run._batches
    monkeypatch.setattr(run, "_batches", lambda todo, _n: batches(todo, 1))  # a commit each
    lines: list[str] = []

    def stop() -> None:  # what the handler prints (the real one then leaves the process)
        if not lines:
            lines.append(stops._line(signal.SIGINT))

    def at(point: str) -> None:
        if point == "after_commit" and not lines:
            # Ctrl-C arrives now: the handler defers to the end of the shield.
            assert not progress.stop_when_safe(stop)

    monkeypatch.setattr(commit, "fault_point", at)
    summary = run_ingest_flow(upstream=str(up), warehouse=str(tmp_path / "wh"), trigger=False,
                              regressions=False)  # fmt: skip
    assert summary["commits"] == [1, 2]
    assert lines == [
        "kindex-etl: interrupted: 1 of 2 batch(es) committed (commit 1: 1 objects, 8 runs); "
        "run the same command again to continue"
    ]
