"""Progress as plain values, watchers, and stops that wait for a commit to become visible."""

from __future__ import annotations

import threading

from kindex_etl.ingestion import IngestOptions, ingest_batch, plan, progress
from tests.helpers import row, write_csv


def test_watchers_hear_rows_and_batches_with_the_committed_counts(tmp_path):
    for i in range(3):
        write_csv(tmp_path / "up" / f"{i}.csv", [row(timestamp=f"2026-06-10 21:03:4{i}")])
    heard: list[tuple[str, int, int]] = []

    def watch(event, p):
        heard.append((event, p.batches_done, p.runs_written))

    options = IngestOptions(max_objects_per_commit=1)
    planned = plan(str(tmp_path / "up"), str(tmp_path / "wh"), options)
    with progress.watching(watch):
        p = progress.planned(planned)
        for batch in planned.batches:
            outcome = ingest_batch(str(tmp_path / "up"), str(tmp_path / "wh"), options, batch)
            progress.batch_done(outcome, len(batch), sum(c.info.size for c in batch))
    assert heard[0] == ("planned", 0, 0)
    assert [h for h in heard if h[0] == "batch"] == [
        ("batch", 1, 1),
        ("batch", 2, 2),
        ("batch", 3, 3),
    ]
    assert p.rows_read == 3 and p.commits == [1, 2, 3] and p.fraction == 1.0
    assert p.committed_line() == "3 of 3 batch(es) committed (commits 1-3: 3 objects, 3 runs)"
    assert "batch 3/3: 3/3 objects, 3 rows" in p.describe()
    # Nothing is heard once the watcher is gone.
    progress.batch_done(outcome, 0, 0)
    assert heard[-1] == ("batch", 3, 3)


def test_a_stop_during_a_commit_runs_right_after_it():
    ran = []
    entered, release = threading.Event(), threading.Event()

    def committing():
        with progress.shielded():
            entered.set()
            release.wait(5)
            ran.append("commit done")

    t = threading.Thread(target=committing)
    t.start()
    entered.wait(5)
    assert progress.stop_when_safe(lambda: ran.append("stopped")) is False
    assert ran == []
    release.set()
    t.join(5)
    assert ran == ["commit done", "stopped"]
    assert progress.stop_when_safe(lambda: ran.append("now")) is True and ran[-1] == "now"
