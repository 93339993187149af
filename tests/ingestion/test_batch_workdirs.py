"""An ingest's work folders: gone on every exit path, and a killed run's swept by the next
(the folders themselves: tests/test_scratch.py)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.load.writers import RunsWriter
from kindex_etl.normalize.columnar import PreparedBatch
from tests.helpers import REPO, row, seed_row, write_csv


@pytest.fixture
def tmpdir_root(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _kindex_dirs(root):
    return sorted(p.name for p in root.iterdir() if p.name.startswith("kindex-"))


def test_successful_and_failed_batches_leave_no_work_folder(tmp_path, tmpdir_root, monkeypatch):
    write_csv(tmp_path / "up" / "a.csv", [seed_row()])
    ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert _kindex_dirs(tmpdir_root) == []

    def fail(self, runs, lines):
        time.sleep(0.05)  # still writing when the reader side has finished
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunsWriter, "write", fail)
    write_csv(tmp_path / "up" / "b.csv", [row(timestamp="2026-06-11 10:00:00")])
    with pytest.raises(OSError, match="No space"):
        ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    time.sleep(0.1)  # a writer thread left running would recreate its folder by now
    assert _kindex_dirs(tmpdir_root) == []


def test_a_failure_on_the_builder_thread_commits_nothing_and_leaves_no_folder(
    tmp_path, tmpdir_root, monkeypatch
):
    # Kept rows become run columns on the builder thread, between the normalizing thread and
    # the writer: its error must come out of the ingest like the writer's, with nothing half
    # committed, and neither thread left to recreate the folder.
    write_csv(tmp_path / "up" / "a.csv", [seed_row()])
    ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    head = sorted(p.name for p in (tmp_path / "wh" / "_kindex" / "log").iterdir())
    threads: list[str] = []
    real_build = PreparedBatch.build

    def fail(self, keep=None):
        threads.append(threading.current_thread().name)
        time.sleep(0.05)
        raise MemoryError("builder out of memory")

    monkeypatch.setattr(PreparedBatch, "build", fail)
    write_csv(tmp_path / "up" / "b.csv", [row(timestamp="2026-06-11 10:00:00")])
    with pytest.raises(MemoryError, match="builder out of memory"):
        ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert threads == ["kindex-builder"]
    time.sleep(0.1)
    assert _kindex_dirs(tmpdir_root) == []
    assert sorted(p.name for p in (tmp_path / "wh" / "_kindex" / "log").iterdir()) == head

    monkeypatch.setattr(PreparedBatch, "build", real_build)
    summary = ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert summary.runs_written == 1


def test_a_sigkilled_runs_folder_is_swept_by_the_next_ingestor(tmp_path, tmpdir_root):
    code = (
        "import os, signal, sys\n"
        "from kindex_etl.scratch import ScratchDir\n"
        "w = ScratchDir.create('e' * 16)\n"
        "(w.path / 'part.parquet').write_bytes(b'x' * 1000)\n"
        "print(w.path, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmpdir_root)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == -9
    left = tmpdir_root / os.path.basename(out.stdout.strip())
    assert left.is_dir()
    with (left / ".kindex-owner").open("a") as fh:  # the kernel let go of the lock
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fh, fcntl.LOCK_UN)
    write_csv(tmp_path / "up" / "a.csv", [seed_row()])
    # The sweep runs when an ingest's ingestor starts.
    ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert not left.exists()
