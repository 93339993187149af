"""Concurrent writers on one warehouse: the conditional create of `_kindex/log/<seq>.json` lets
exactly one of them take each sequence number, and the losers must neither duplicate nor
destroy the winner's work.

Two kinds of test: in-process ones that force one interleaving step by step (the loser of a
commit race on the same batch id; two publishers of one batch; a reader during a publish), and
subprocess ones that start real writers at the same instant: `python -c` calling
`pipeline.ingest` (the commit protocol alone) and the `kindex-etl` CLI with its Prefect flow.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.catalog import default_catalog
from kindex_etl.extract.discover import discover
from kindex_etl.ingestion.batch import Ingestor
from kindex_etl.ingestion.run import _source
from kindex_etl.load import layout
from kindex_etl.load.record import CommitRecord
from kindex_etl.load.warehouse import Warehouse
from kindex_etl.storage import ObjectStore, PreconditionFailed, open_store
from tests.warehouse import (
    REPO,
    assert_consistent,
    assert_same_files,
    committed_keys,
    data_objects,
    ingest_cmd,
    keys_under,
    log_records,
    put_objects,
    snapshot_keys,
    subprocess_env,
    summary_of,
    synthetic_csv,
    tables,
)

NO_TRIGGER = IngestOptions(trigger=False)


@pytest.fixture(params=["local", "s3"])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """Makes a fresh location (folder, or bucket + prefix) for an upstream or a warehouse."""
    if request.param == "local":
        return lambda name: str(tmp_path / name)
    make_bucket = request.getfixturevalue("make_bucket")
    return lambda name: f"s3://{make_bucket()}/{name}"


def _upstream(url: str, n: int = 1) -> str:
    objects = {
        f"benchmarks/c{i:02d}/benchmark.csv": synthetic_csv(
            ["0.8.0", f"0.8.{i + 1}"], day=1 + i % 3
        )
        for i in range(n)
    }
    put_objects(url, objects)
    return url


def _rival(url: str) -> tuple[Warehouse, Ingestor]:
    warehouse = Warehouse(open_store(url, create=True))
    warehouse.recover(timedelta(hours=1))
    return warehouse, Ingestor(warehouse, default_catalog())


def _sources(upstream: str) -> list[Any]:
    store = open_store(upstream)
    return [_source(store, c) for c in discover(store)]


# -- one interleaving at a time -----------------------------------------------------------------


@pytest.mark.parametrize("loser_first", [True, False], ids=["loser-first", "winner-first"])
def test_losing_a_race_on_the_same_batch_keeps_the_winners_files(
    new_url: Callable[[str], str], loser_first: bool
) -> None:
    """Same base sequence, same sources: both writers stage the same batch id. The loser's
    clean-up must not delete what the winner's commit record now names."""
    upstream, wh = _upstream(new_url("up")), new_url("wh")
    (wa, ia), (wb, ib) = _rival(wh), _rival(wh)
    record_a = ia.process(_sources(upstream)).record
    record_b = ib.process(_sources(upstream)).record
    assert record_a is not None and record_b is not None
    assert record_a.batch == record_b.batch
    wa.commit(record_a)
    with pytest.raises(PreconditionFailed):
        wb.commit(record_b)
    if loser_first:
        wb.discard(record_b.batch)
        wa.publish(record_a)
    else:
        wa.publish(record_a)
        wb.discard(record_b.batch)
    wa.update_snapshot()
    state = assert_consistent(wh)
    assert set(state["data"]) == {f.key for f in record_a.files}
    assert tables(state["data"])[layout.RUNS].num_rows == record_a.counts.runs


def test_two_writers_of_one_process_in_one_millisecond_still_race(
    new_url: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser's commit, whose PUT failed, reads the record there back to see whether it is
    its own (a lost reply). Same process, same batch, same commit time (a fast local store
    commits both within one millisecond, as the test above sometimes did): the bytes must still
    differ, or the loser takes the winner's record for its own and raises nothing."""
    from kindex_etl.load import warehouse as warehouse_module

    monkeypatch.setattr(warehouse_module, "utcnow", lambda: "2026-12-02T03:00:00.000Z")
    upstream, wh = _upstream(new_url("up")), new_url("wh")
    (wa, ia), (wb, ib) = _rival(wh), _rival(wh)
    record_a = ia.process(_sources(upstream)).record
    record_b = ib.process(_sources(upstream)).record
    assert record_a is not None and record_b is not None and record_a.batch == record_b.batch
    assert wa.commit(record_a) == 1
    with pytest.raises(PreconditionFailed):
        wb.commit(record_b)


def test_a_published_file_is_never_replaced(new_url: Callable[[str], str]) -> None:
    """The loser of a race on the same batch id may stage its copy after the winner published
    (same rows, not always the same Parquet bytes). Its clean-up publishes the batch again:
    that must drop the late copy, not overwrite a file readers may be fetching ranges of."""
    upstream, wh = _upstream(new_url("up")), new_url("wh")
    (wa, ia), (wb, ib) = _rival(wh), _rival(wh)
    record_a = ia.process(_sources(upstream)).record
    record_b = ib.process(_sources(upstream)).record
    assert record_a is not None and record_b is not None
    wa.commit(record_a)
    wa.publish(record_a)
    wa.update_snapshot()
    published = data_objects(wh)
    store = open_store(wh)
    for key in published:  # the loser's late staging, standing in for different bytes
        store.put_bytes(layout.staging_key(record_b.batch, key), b"late copy of " + key.encode())
    with pytest.raises(PreconditionFailed):
        wb.commit(record_b)
    wb.discard(record_b.batch)
    assert data_objects(wh) == published
    assert_consistent(wh)


def test_losing_to_another_batch_discards_own_staging(new_url: Callable[[str], str]) -> None:
    upstream, wh = _upstream(new_url("up"), n=2), new_url("wh")
    (wa, ia), (wb, ib) = _rival(wh), _rival(wh)
    sources = _sources(upstream)
    record_a = ia.process(sources[:1]).record
    record_b = ib.process(sources[1:]).record
    assert record_a is not None and record_b is not None
    assert record_a.batch != record_b.batch
    wa.commit(record_a)
    with pytest.raises(PreconditionFailed):
        wb.commit(record_b)
    wb.discard(record_b.batch)
    assert keys_under(wh, f"{layout.STAGING}{record_b.batch}/") == set()
    assert keys_under(wh, f"{layout.STAGING}{record_a.batch}/")  # the winner's, untouched
    wa.publish(record_a)
    wa.update_snapshot()
    assert_consistent(wh)


class _Interleave:
    """An ObjectStore that runs `action` once, just before the first call matching `when`.

    It wraps a real store (folder or moto S3) and changes nothing else: a way to put another
    writer's step at one exact point of this writer's sequence.
    """

    def __init__(
        self, store: ObjectStore, when: Callable[[str, str], bool], action: Callable[[], None]
    ) -> None:
        self._store, self._when, self._action = store, when, action
        self.url = store.url
        self.fired = False

    def _maybe(self, op: str, key: str) -> None:
        if not self.fired and self._when(op, key):
            self.fired = True
            self._action()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in ("head", "copy", "local_path", "open_read"):
            return attr

        def call(key: str, *args: Any, **kwargs: Any) -> Any:
            self._maybe(name, key)
            return attr(key, *args, **kwargs)

        return call


def _committed_unpublished(upstream: str, wh: str) -> CommitRecord:
    warehouse, ingestor = _rival(wh)
    record = ingestor.process(_sources(upstream)).record
    assert record is not None
    warehouse.commit(record)
    return record


def test_two_publishers_of_one_batch(new_url: Callable[[str], str]) -> None:
    """Writer A has seen a staged file and is about to copy it when writer B (its recover, or
    the loser of a race on this batch) publishes the whole batch."""
    upstream, wh = _upstream(new_url("up")), new_url("wh")
    record = _committed_unpublished(upstream, wh)
    other = Warehouse(open_store(wh))
    other.refresh()
    store = _Interleave(
        open_store(wh),
        lambda op, key: op == "copy" and key.startswith(layout.STAGING),
        lambda: other.publish(record),
    )
    mine = Warehouse(store)  # type: ignore[arg-type]
    mine.refresh()
    mine.publish(record)
    assert store.fired
    mine.update_snapshot()
    assert_consistent(wh)


def test_reader_during_a_publish(new_url: Callable[[str], str]) -> None:
    """A writer rebuilding its run index reads a committed batch while another writer moves
    it from staging to its final keys between the reader's looks."""
    upstream, wh = _upstream(new_url("up")), new_url("wh")
    record = _committed_unpublished(upstream, wh)
    other = Warehouse(open_store(wh))
    other.refresh()
    store = _Interleave(
        open_store(wh),
        lambda op, key: op == "local_path" and key.startswith(layout.STAGING),
        lambda: other.publish(record),
    )
    reader = Warehouse(store)  # type: ignore[arg-type]
    reader.refresh()
    table = reader.read_table(layout.RUNS)
    assert store.fired
    assert table is not None and table.num_rows == record.counts.runs


def test_snapshot_never_lists_unpublished_files(new_url: Callable[[str], str]) -> None:
    """Writer A commits and dies before publishing; writer B commits the next batch. B's
    snapshot covers A's batch too, so B first rolls A's batch forward."""
    upstream, wh = _upstream(new_url("up"), n=2), new_url("wh")
    store = open_store(upstream)
    first, second = discover(store)
    wa, ia = _rival(wh)
    record_a = ia.process([_source(store, first)]).record
    assert record_a is not None
    wa.commit(record_a)  # ...and no publish: the writer is gone
    wb = Warehouse(open_store(wh))
    wb.refresh()  # no recover: B meets A's batch only when it advances the snapshot
    ib = Ingestor(wb, default_catalog())
    record_b = ib.process([_source(store, second)]).record
    assert record_b is not None
    wb.commit(record_b)
    wb.publish(record_b)
    wb.update_snapshot()
    listed = snapshot_keys(wh)
    assert listed == committed_keys([record_a.model_dump(), record_b.model_dump()])
    assert listed <= set(data_objects(wh))
    assert_consistent(wh)


# -- real writers, started at the same instant --------------------------------------------------


def _start_together(cmds: list[list[str]], envs: list[dict[str, str]], go: Path) -> list[Any]:
    procs = [
        subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for cmd, env in zip(cmds, envs, strict=True)
    ]  # fmt: skip
    time.sleep(1.5)  # both have imported everything and wait at the start line
    go.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def _assert_like_single_run(wh: str, reference: str, summaries: list[dict[str, Any]]) -> None:
    """Concurrent writers must leave what one writer alone leaves, file for file."""
    state = assert_consistent(wh)
    ref = assert_consistent(reference)
    assert len(state["records"]) == len(ref["records"])

    def objects(records: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
        return sorted((o["key"], o["etag"], o["runs"]) for r in records for o in r["objects"])

    assert objects(state["records"]) == objects(ref["records"])
    # Batch ids hash the base sequence and the sources, so the files even have the same names.
    assert_same_files(state["data"], ref["data"])
    ingested = sum(s["objects_ingested"] for s in summaries)
    assert ingested == len(objects(ref["records"]))
    assert sum(s["runs_written"] for s in summaries) == tables(ref["data"])[layout.RUNS].num_rows


@pytest.mark.slow
def test_concurrent_ingests(new_url: Callable[[str], str], tmp_path: Path) -> None:
    """Two `pipeline.ingest` processes, one commit per object, racing from the same instant."""
    upstream, wh, reference = _upstream(new_url("up"), n=4), new_url("wh"), new_url("ref")
    ingest(upstream, reference, IngestOptions(trigger=False, max_objects_per_commit=1))
    go = tmp_path / "go"
    env = subprocess_env(tmp_path, KINDEX_TEST_GO_FILE=str(go))
    cmd = ingest_cmd(upstream, wh, max_objects_per_commit=1)
    procs = _start_together([cmd, cmd], [env, env], go)
    summaries = [summary_of(p) for p in procs]
    _assert_like_single_run(wh, reference, summaries)


def test_the_report_after_an_ingest_is_no_data(make_bucket: Callable[[], str]) -> None:
    """The CLI's ingest flow runs the regressions flow once it committed, and that rewrites the
    report (`reports/`), which no commit lists. The race below leaves it whenever the CLI wins;
    here it is left every time: the warehouse is still consistent and the same data as one
    ingest alone."""
    from kindex_etl.analysis.run import run_regressions

    upstream = _upstream(f"s3://{make_bucket()}/up", n=3)
    wh, reference = f"s3://{make_bucket()}/wh", f"s3://{make_bucket()}/ref"
    ingest(upstream, reference, NO_TRIGGER)
    ingest(upstream, wh, NO_TRIGGER)
    assert run_regressions(wh).report == f"{wh}/{layout.REPORTS}index.html"
    assert f"{layout.REPORTS}index.html" in keys_under(wh, layout.REPORTS)
    state, ref = assert_consistent(wh), assert_consistent(reference)
    assert_same_files(state["data"], ref["data"])
    # Anything else outside the tables is still caught.
    put_objects(wh, {"reports/notes.txt": b"stray"})
    with pytest.raises(AssertionError):
        assert_consistent(wh)


@pytest.mark.slow
def test_cli_ingest_racing_a_direct_writer_on_s3(
    make_bucket: Callable[[], str], tmp_path: Path
) -> None:
    """The real `kindex-etl ingest` (Prefect flow, ephemeral server, own PREFECT_HOME) and a
    second writer at once on one S3 warehouse. Two CLI processes would spend most of their
    time starting Prefect servers one after the other on a small machine, so the second writer
    calls `pipeline.ingest` and starts the moment the CLI's recover step first writes the
    warehouse (`_kindex/snapshot.json`): both then ingest the same objects together."""
    upstream = _upstream(f"s3://{make_bucket()}/up", n=3)
    wh, reference = f"s3://{make_bucket()}/wh", f"s3://{make_bucket()}/ref"
    ingest(upstream, reference, NO_TRIGGER)
    cli = [sys.executable, "-m", "kindex_etl.cli", "ingest", "--upstream", upstream,
           "--warehouse", wh, "--json", "--no-trigger"]  # fmt: skip
    direct = ingest_cmd(upstream, wh)
    envs = [
        subprocess_env(tmp_path),
        subprocess_env(tmp_path, KINDEX_TEST_GO_KEY=layout.SNAPSHOT),
    ]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for cmd, env in zip([cli, direct], envs, strict=True)
    ]  # fmt: skip
    summaries = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        done = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
        summaries.append(summary_of(done))
    assert [s["warehouse"] for s in summaries] == [wh, wh]
    _assert_like_single_run(wh, reference, summaries)
    assert len(log_records(wh)) == 1


@pytest.mark.slow
def test_three_writers_of_different_objects_all_land_on_s3(
    make_bucket: Callable[[], str], tmp_path: Path
) -> None:
    """Three processes, each ingesting its own objects one commit each, racing on one S3
    warehouse: every one succeeds, and the warehouse holds each object once, as one writer
    alone leaves it (issue 31: two of three used to give up after 8 commit conflicts)."""
    bucket = make_bucket()
    upstreams = []
    for w in range(3):
        objects = {
            f"benchmarks/w{w}c{i}/benchmark.csv": synthetic_csv(
                ["0.8.0", "0.8.1"], day=1 + 3 * w + i
            )
            for i in range(3)
        }
        upstreams.append(f"s3://{bucket}/up-{w}")
        put_objects(upstreams[-1], objects)
    wh, reference = f"s3://{bucket}/wh", f"s3://{bucket}/ref"
    for up in upstreams:
        ingest(up, reference, IngestOptions(trigger=False, max_objects_per_commit=1))
    go = tmp_path / "go"
    env = subprocess_env(tmp_path, KINDEX_TEST_GO_FILE=str(go))
    cmds = [ingest_cmd(up, wh, max_objects_per_commit=1) for up in upstreams]
    procs = _start_together(cmds, [env] * 3, go)
    summaries = [summary_of(p) for p in procs]  # each exited 0 with its summary
    assert [s["objects_ingested"] for s in summaries] == [3, 3, 3]
    state, ref = assert_consistent(wh), assert_consistent(reference)

    def objects(records: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
        return sorted((o["key"], o["etag"], o["runs"]) for r in records for o in r["objects"])

    assert objects(state["records"]) == objects(ref["records"])
    runs, ref_runs = tables(state["data"])[layout.RUNS], tables(ref["data"])[layout.RUNS]
    assert sorted(runs.column("external_id").to_pylist()) == sorted(
        ref_runs.column("external_id").to_pylist()
    )
