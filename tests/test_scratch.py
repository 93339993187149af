"""Scratch folders: a live process's are kept, a dead one's swept, whichever stage made them."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kindex_etl.analysis.run import run_regressions
from kindex_etl.scratch import ScratchDir, remove_orphaned
from tests.analysis.helpers import build_warehouse, series_rows
from tests.helpers import REPO


@pytest.fixture
def tmpdir_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _old(path: Path) -> Path:
    path.mkdir()
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    return path


def test_orphans_are_removed_and_live_folders_kept(tmpdir_root: Path) -> None:
    live = ScratchDir.create("a" * 16)
    dead = ScratchDir.create("series")
    assert dead._owner is not None
    dead._owner.close()  # as the kernel does when its process dies
    dead._owner = None
    # Without a lock: judged by age, and only where the name is one of ours.
    old_batch = _old(tmpdir_root / ("kindex-" + "c" * 16 + "-x"))
    old_spill = _old(tmpdir_root / "kindex-points-x")
    fresh_batch = tmpdir_root / ("kindex-" + "d" * 16 + "-x")
    fresh_batch.mkdir()
    campaign = _old(tmpdir_root / "kindex-rerun-x")  # a GPU campaign's: not ours to judge
    # A FIFO where the lock file should be (opening it to read would wait for a writer), a
    # link to a folder, and a link as the lock: skipped, and the sweep does not hang.
    fifo = _old(tmpdir_root / ("kindex-" + "e" * 16 + "-x"))
    os.mkfifo(fifo / ".kindex-owner")
    os.utime(fifo, (time.time(), time.time()))
    target = _old(tmpdir_root / "elsewhere")
    (tmpdir_root / ("kindex-" + "f" * 16 + "-link")).symlink_to(target)
    linked_lock = _old(tmpdir_root / "kindex-series-y")
    (linked_lock / ".kindex-owner").symlink_to(tmpdir_root / "elsewhere")
    removed = remove_orphaned()
    assert sorted(p.name for p in removed) == sorted(
        [dead.path.name, old_batch.name, old_spill.name]
    )
    assert live.path.exists() and fresh_batch.exists() and campaign.exists()
    assert fifo.exists() and target.exists() and linked_lock.exists()
    with live as path:
        assert path == live.path
    assert not live.path.exists()


def test_a_killed_analysis_leaves_spills_that_the_next_analysis_sweeps(
    tmp_path: Path, tmpdir_root: Path
) -> None:
    wh = build_warehouse(tmp_path, [series_rows([0.1] * 8)])  # (an ingest sweeps as well)
    # What an analysis holds on local disk while it runs, made by a process then SIGKILLed.
    code = (
        "import os, signal\n"
        "from kindex_etl.analysis.spill import PointSpill, RunIdSpill\n"
        "from kindex_etl.scratch import ScratchDir\n"
        "from kindex_etl.workers import Workers\n"
        "held = [RunIdSpill(), PointSpill(), Workers(2), ScratchDir.create('series')]\n"
        "held[2].share({'snapshot': 1})\n"
        "for h in held:\n"
        "    path = getattr(h, '_folder', h)\n"
        "    path = getattr(path, 'path', path)\n"
        "    (path / 'spill.arrow').write_bytes(b'x' * 1000)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmpdir_root)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True)
    assert out.returncode == -9, out.stderr
    left = sorted(p.name.rsplit("-", 1)[0] for p in tmpdir_root.iterdir())
    assert left == ["kindex-points", "kindex-run-ids", "kindex-series", "kindex-workers"]

    # A live folder of another analysis (this process's) stays.
    live = ScratchDir.create("series")
    run_regressions(wh, report=False)
    assert [p.name for p in tmpdir_root.iterdir()] == [live.path.name]
    live.remove()
