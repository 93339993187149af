"""An ingest that dies at each point of its commit, then runs again.

The matrix crashes in-process (`crash_at`: SimulatedCrash, which nothing in the pipeline
catches, so nothing after the point runs); one test kills a real subprocess with SIGKILL
(KINDEX_FAULT_AT) to show a dead process leaves the same state.

At every crash point: a reader going through `_kindex/snapshot.json` sees exactly the previous
state; the table folders hold no data file that no commit record lists, and only a crash inside
the documented publish window (after the commit, before the last file moved) leaves a batch
part-published there. The next run rolls a committed batch forward or removes an uncommitted
one (KINDEX_ORPHAN_GRACE_S=0), and the warehouse then equals that of an uninterrupted run.
"""

from __future__ import annotations

import itertools
import signal
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.load import layout
from kindex_etl.load.faults import SimulatedCrash, crash_at
from kindex_etl.load.warehouse import Warehouse
from kindex_etl.storage import open_store
from tests.warehouse import (
    assert_consistent,
    assert_same_files,
    committed_keys,
    data_objects,
    keys_under,
    log_records,
    put_objects,
    run_ingest,
    snapshot,
    subprocess_env,
    summary_of,
    synthetic_csv,
)

NO_TRIGGER = IngestOptions(trigger=False)
KEY_A = "benchmarks/aaaa111/benchmark.csv"
KEY_B = "benchmarks/bbbb222-v0.8.1/benchmark.csv"
CSV_A = synthetic_csv(["0.8.0"], day=1)
# Two releases (two runs partitions), one row repeated from A (a duplicate, not a new run).
CSV_B = synthetic_csv(["0.8.0", "0.8.1"], day=2) + CSV_A.splitlines(keepends=True)[1]
FAULTS = ["after_stage", "after_commit", "mid_publish", "after_publish"]
PUBLISH_WINDOW = {"after_commit", "mid_publish"}


@pytest.fixture(scope="module", params=["local", "s3"])
def new_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], str]:
    """Makes a fresh location (folder, or bucket + prefix) on one backend."""
    if request.param == "local":
        root = tmp_path_factory.mktemp("crash")
        counter = itertools.count()
        return lambda name: str(root / f"{name}-{next(counter)}")
    client = request.getfixturevalue("s3_client")

    def make(name: str) -> str:
        bucket = f"kindex-crash-{uuid.uuid4().hex[:16]}"
        client.create_bucket(Bucket=bucket)
        return f"s3://{bucket}/{name}"

    return make


@pytest.fixture(scope="module")
def uninterrupted(new_url: Callable[[str], str]) -> dict[str, Any]:
    """The same two ingests (A, then A and B), never interrupted."""
    upstream, wh = new_url("up"), new_url("ref")
    put_objects(upstream, {KEY_A: CSV_A})
    ingest(upstream, wh, NO_TRIGGER)
    put_objects(upstream, {KEY_B: CSV_B})
    ingest(upstream, wh, NO_TRIGGER)
    return assert_consistent(wh)


def _check_right_after_crash(
    wh: str, fault: str, before: dict[str, bytes], before_snapshot: dict[str, Any]
) -> None:
    records = log_records(wh)
    committed = committed_keys(records)
    data = data_objects(wh)
    staged = keys_under(wh, layout.STAGING)

    # A reader of the snapshot sees the previous state, complete: the same list, every file
    # there, the same bytes. Never a part of the crashed batch.
    snap = snapshot(wh)
    assert snap == before_snapshot
    listed = {k for keys in snap["tables"].values() for k in keys}
    assert {k: data[k] for k in listed} == before

    # No data file in the table folders that no commit record lists.
    assert set(data) <= committed

    if fault == "after_stage":
        assert len(records) == 1  # nothing committed: the batch is invisible, only staged
        assert data == before
        assert staged
        return
    new = records[-1]
    assert len(records) == 2
    new_files = {f["key"] for f in new["files"]}
    in_staging = {k.split("/", 3)[3] for k in staged}
    assert {k.split("/", 3)[2] for k in staged} <= {new["batch"]}
    published = set(data) - set(before)
    assert published <= new_files
    if fault == "after_commit":
        assert not published and in_staging == new_files
    elif fault == "mid_publish":
        # The publish window: the first file moved, the rest still staged.
        assert published and in_staging and published | in_staging == new_files
        assert not published & in_staging
    else:  # after_publish: every file in place, only the snapshot not yet advanced
        assert published == new_files and not staged


@pytest.mark.parametrize("fault", FAULTS)
def test_crashed_ingest_recovers(
    new_url: Callable[[str], str], uninterrupted: dict[str, Any], fault: str
) -> None:
    upstream, wh = new_url("up"), new_url("wh")
    put_objects(upstream, {KEY_A: CSV_A})
    ingest(upstream, wh, NO_TRIGGER)
    before, before_snapshot = data_objects(wh), snapshot(wh)
    assert before_snapshot is not None and before
    put_objects(upstream, {KEY_B: CSV_B})

    with pytest.raises(SimulatedCrash), crash_at(fault):
        ingest(upstream, wh, NO_TRIGGER)
    _check_right_after_crash(wh, fault, before, before_snapshot)

    grace = timedelta(0) if fault == "after_stage" else timedelta(hours=1)
    rerun = ingest(upstream, wh, IngestOptions(trigger=False, orphan_grace=grace)).as_dict()
    expected = {
        "after_stage": ({"rolled_forward": 0, "orphans_removed": 1}, [2]),
        "after_commit": ({"rolled_forward": 1, "orphans_removed": 0}, []),
        "mid_publish": ({"rolled_forward": 1, "orphans_removed": 0}, []),
        "after_publish": ({"rolled_forward": 0, "orphans_removed": 0}, []),
    }[fault]
    assert (rerun["recovered"], rerun["commits"]) == expected

    state = assert_consistent(wh)
    assert_same_files(state["data"], uninterrupted["data"])

    def objects(records: list[dict[str, Any]]) -> list[Any]:
        return [
            (r["seq"], r["batch"], r["files"], r["objects"], r["counts"], r["digests"])
            for r in records
        ]

    assert objects(state["records"]) == objects(uninterrupted["records"])


@pytest.mark.slow
def test_killed_ingest_rerun_within_grace(tmp_path: Path) -> None:
    """A real SIGKILL after staging. With the default grace (1 h) the rerun removes no orphan,
    yet staging ends up empty: batch ids are deterministic, so the rerun stages, commits and
    publishes the same batch."""
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    put_objects(upstream, {KEY_A: CSV_A, KEY_B: CSV_B})
    crashed = run_ingest(upstream, wh, subprocess_env(tmp_path, KINDEX_FAULT_AT="after_stage"))
    assert crashed.returncode == -signal.SIGKILL
    snap = snapshot(wh)
    assert snap is None or (snap["seq"], snap["tables"]) == (0, {})
    assert data_objects(wh) == {} and keys_under(wh, layout.STAGING)
    rerun = summary_of(run_ingest(upstream, wh, subprocess_env(tmp_path)))
    assert rerun["recovered"] == {"rolled_forward": 0, "orphans_removed": 0}
    state = assert_consistent(wh)
    assert len(state["records"]) == 1
    ingest(upstream, str(tmp_path / "ref"), NO_TRIGGER)
    assert_same_files(state["data"], assert_consistent(str(tmp_path / "ref"))["data"])


def test_orphan_cleanup_is_safe(new_url: Callable[[str], str]) -> None:
    """Staging that no commit claims goes only once older than the grace period; staging of a
    committed batch is never removed, only published, whatever its age."""
    upstream, wh = new_url("up"), new_url("wh")
    put_objects(upstream, {KEY_A: CSV_A})
    ingest(upstream, wh, NO_TRIGGER)
    store = open_store(wh)
    orphan = layout.staging_key("0123456789abcdef", "benchmark_runs/release=9.9/part-x.parquet")
    store.put_bytes(orphan, b"not committed")
    # A committed batch whose publish never ran: its record names a staged file.
    [record] = log_records(wh)
    moved = record["files"][0]["key"]
    store.copy(moved, layout.staging_key(record["batch"], moved))
    store.delete(moved)

    warehouse = Warehouse(open_store(wh))
    assert warehouse.recover(timedelta(hours=1)) == {"rolled_forward": 1, "orphans_removed": 0}
    assert keys_under(wh, layout.STAGING) == {orphan}
    assert store.head(moved) is not None
    assert warehouse.recover(timedelta(0)) == {"rolled_forward": 0, "orphans_removed": 1}
    assert keys_under(wh, layout.STAGING) == set()
    assert_consistent(wh)
