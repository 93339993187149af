"""The analysis over worker processes: the same changes, rows and pages as one process."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from kindex_etl.analysis.run import detect_changes, run_regressions
from kindex_etl.api import IngestOptions, ingest
from kindex_etl.storage import open_store
from kindex_etl.workers import Workers, available_cpus, shared, worker_count
from tests.analysis.helpers import build_warehouse, series_rows
from tests.helpers import write_csv

STEP = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]
SLOW_AT_6 = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.14, 0.14]
FLAT = [0.1] * 8
WORKERS_ENV = "KINDEX_ANALYSIS_WORKERS"


def _regressions(wh: str) -> list[dict[str, object]]:
    snap = json.loads((Path(wh) / "_kindex/snapshot.json").read_text())
    table = ds.dataset([f"{wh}/{k}" for k in snap["tables"]["regressions"]]).to_table()
    return sorted(table.to_pylist(), key=lambda r: str(r["change_id"]))


def _pages(wh: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((Path(wh) / "reports").iterdir())}


def test_worker_processes_find_commit_and_draw_what_one_process_does(tmp_path: Path) -> None:
    groups = [
        series_rows(STEP),
        series_rows(SLOW_AT_6, x="4096"),
        series_rows(FLAT, x="8192"),
        series_rows(STEP, kernel="rms_norm"),
        series_rows(STEP, provider="huggingface"),
        series_rows(SLOW_AT_6, kernel="swiglu", metric="memory"),
        series_rows(FLAT, kernel="geglu", gpu="NVIDIA A100-SXM4-80GB"),
    ]
    one = build_warehouse(tmp_path, groups)
    two = str(tmp_path / "copy")
    shutil.copytree(one, two)

    # 56 runs in buckets of at most 8: several buckets, so the processes get work.
    alone = run_regressions(one, workers=1, bucket_rows=8)
    spread = run_regressions(two, workers=2, bucket_rows=8)

    assert (alone.workers, spread.workers) == (1, 2)
    assert alone.runs == spread.runs == 56
    assert alone.series == spread.series
    assert alone.analysed_series == spread.analysed_series
    assert len(alone.alerts) >= 3  # the steps are found: there is something to compare
    assert list(alone.full_changes()) == list(spread.full_changes())
    assert alone.new == spread.new
    assert _regressions(one) == _regressions(two)
    pages = _pages(one)
    assert {"index.html", "rms_norm.html", "swiglu.html"} <= set(pages)
    assert pages == _pages(two)

    # An hourly analysis reads only what its ingest touched: in this process.
    seq = spread.commit
    assert seq is not None
    write_csv(tmp_path / "later" / "d.csv", series_rows(STEP, kernel="geglu", x="1024"))
    ingest(str(tmp_path / "later"), two, IngestOptions(trigger=False))
    hourly = run_regressions(two, workers=2, bucket_rows=8, after_seq=seq)
    assert hourly.incremental and hourly.workers == 1
    assert hourly.runs == 8 and len(hourly.new_alerts) == 1


def test_a_warehouse_of_one_bucket_starts_no_process(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    result = run_regressions(wh, workers=4)
    assert result.workers == 1
    assert len(result.alerts) == 1


def test_worker_count_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert worker_count() == 3 == Workers().count
    monkeypatch.setenv(WORKERS_ENV, "1")
    assert worker_count() == 1
    assert not Workers().parallel
    monkeypatch.setenv(WORKERS_ENV, "0")  # the default: one per CPU, at most 8
    assert worker_count() == min(available_cpus(), 8)
    monkeypatch.delenv(WORKERS_ENV)
    assert worker_count() == min(available_cpus(), 8)


def test_shared_state_is_read_back_and_its_folder_removed() -> None:
    pool = Workers(2)
    first = pool.share({"runs": [1, 2, 3]})
    second = pool.share(("another", None))
    assert first != second
    assert shared(first) == {"runs": [1, 2, 3]}
    assert shared(second) == ("another", None)
    folder = pool.folder()
    assert not pool.started  # sharing starts no process
    pool.close()
    assert not folder.exists()


def test_workers_read_a_bucket_through_the_environment_as_the_parent_does(
    tmp_path: Path, make_bucket: Callable[[], str]
) -> None:
    # Spawned workers share nothing but the environment: they open the S3 store from the
    # warehouse URL and the standard AWS chain (here pointing at moto's server on loopback).
    bucket = make_bucket()
    up = tmp_path / "up"
    write_csv(up / "a.csv", series_rows(STEP))
    write_csv(up / "b.csv", series_rows(SLOW_AT_6, x="4096"))
    write_csv(up / "c.csv", series_rows(STEP, kernel="rms_norm"))
    url = f"s3://{bucket}/wh"
    ingest(str(up), url, IngestOptions(trigger=False))
    store = open_store(url)
    alone = detect_changes(store, bucket_rows=4)
    with Workers(2) as pool:
        spread = detect_changes(store, bucket_rows=4, workers=pool)
        assert pool.started
    assert len(alone.changes) == 3
    assert list(spread.full_changes()) == list(alone.full_changes())


def test_run_counts_on_a_bucket_come_from_the_checkpoint_too(
    tmp_path: Path, make_bucket: Callable[[], str]
) -> None:
    # On S3 the counts come from the log, not the files: files committed before a checkpoint
    # counted 0 once the records behind it were gone, and the warehouse was one bucket.
    from kindex_etl.analysis.series import RunSource
    from kindex_etl.load.warehouse import Warehouse

    bucket = make_bucket()
    up = tmp_path / "up"
    write_csv(up / "a.csv", series_rows(STEP))
    url = f"s3://{bucket}/wh"
    ingest(str(up), url, IngestOptions(trigger=False))
    write_csv(up / "b.csv", series_rows(STEP, kernel="rms_norm"))
    ingest(str(up), url, IngestOptions(trigger=False))
    store = open_store(url)
    wh = Warehouse(store)
    wh.refresh()
    assert wh.maybe_checkpoint(interval=1) is not None
    source = RunSource.open(store, bucket_rows=4)
    assert source.store.local_path(source.run_files[0]) is None  # counted from the log
    assert sum(source.file_rows(source.run_files)) == 16
    assert source.bucket_digits(source.file_rows(source.run_files)) == 1


def test_a_bucket_taken_back_is_not_held_until_the_last(tmp_path: Path) -> None:
    import gc
    import weakref

    from kindex_etl.analysis.buckets import BucketWork, analyse_buckets
    from kindex_etl.analysis.calibration import default_calibration
    from kindex_etl.analysis.series import RunSource
    from kindex_etl.extract.history import default_history

    wh = build_warehouse(
        tmp_path, [series_rows(STEP, kernel=k) for k in ("rms_norm", "swiglu", "geglu", "x")]
    )
    work = BucketWork(default_calibration(), {}, default_history(), points=True)
    taken: list[weakref.ref[object]] = []
    with Workers(2) as pool:
        for found in analyse_buckets(RunSource.open(open_store(wh), bucket_rows=8), work, pool):
            assert found.runs
            taken.append(weakref.ref(found))
            del found
            gc.collect()
            assert all(ref() is None for ref in taken)  # the future let go of its result
        assert pool.started and len(taken) > 1


def test_an_hourly_analysis_that_touched_most_series_spreads_them_over_the_workers(
    tmp_path: Path,
) -> None:
    # What a per-commit file of upstream's does: it touches most series, whose runs are then
    # most of the warehouse's (`buckets.worth_processes`).
    xs = ["1024", "2048", "4096", "8192", "16384", "32768"]
    one = build_warehouse(tmp_path, [series_rows(FLAT, x=x) for x in xs])
    seq = run_regressions(one, workers=1, bucket_rows=8).seq
    newer = ("0.10.0", "0.10.1", "0.11.0")
    later = [r for x in xs[:5] for r in series_rows([0.14] * 3, x=x, releases=newer, day=3)]
    write_csv(tmp_path / "later" / "d.csv", later)
    ingest(str(tmp_path / "later"), one, IngestOptions(trigger=False))
    two = str(tmp_path / "copy")
    shutil.copytree(one, two)

    alone = run_regressions(one, workers=1, bucket_rows=8, after_seq=seq)
    spread = run_regressions(two, workers=2, bucket_rows=8, after_seq=seq)

    assert alone.incremental and spread.incremental
    assert (alone.workers, spread.workers) == (1, 2)
    assert alone.runs == spread.runs == 55  # the five touched workloads' runs, both days
    assert len(alone.new_alerts) == 5
    assert list(alone.full_changes()) == list(spread.full_changes())
    assert alone.new == spread.new
    assert _regressions(one) == _regressions(two)
    # The report is a full analysis's: an hourly one makes no release points for it.
    hourly_points: list[object] = []
    full_points: list[object] = []
    assert detect_changes(open_store(two), points=hourly_points, after_seq=seq).incremental
    detect_changes(open_store(two), points=full_points)
    assert hourly_points == [] and full_points


def test_an_hourly_analysis_counts_the_untouched_series_at_a_shared_step(tmp_path: Path) -> None:
    # Five kernels step at one release on one kind of machine: an environment change (the
    # calibration's `environment_kernels`). An hourly ingest then brings runs of two of them;
    # its analysis looks at their series only, and still counts the other three's changes
    # there, as the table holds them: nothing becomes an alert that the full analysis would
    # call environment.
    kernels = ["rms_norm", "swiglu", "geglu", "layer_norm", "softmax"]
    wh = build_warehouse(tmp_path, [series_rows(STEP, kernel=k) for k in kernels])
    full = run_regressions(wh, workers=1)
    assert {c["state"] for c in full.changes} == {"environment"}
    assert {c["kernels_at_step"] for c in full.changes} == {5}
    newer = ("0.10.0", "0.10.1", "0.11.0")
    later = [
        r for k in kernels[:2] for r in series_rows([0.13] * 3, kernel=k, releases=newer, day=3)
    ]
    write_csv(tmp_path / "later" / "d.csv", later)
    ingest(str(tmp_path / "later"), wh, IngestOptions(trigger=False))

    hourly = run_regressions(wh, workers=1, after_seq=full.seq)
    assert hourly.incremental and len(hourly.changes) == 2
    assert [(c["state"], c["kernels_at_step"]) for c in hourly.changes] == [("environment", 5)] * 2
    assert hourly.new == []
    again = run_regressions(wh, workers=1)
    assert not again.incremental and again.new == []


def test_an_hourly_analysis_judges_again_the_untouched_series_whose_step_it_moved(
    tmp_path: Path,
) -> None:
    # Four kernels step at one release: under the calibration's five, four alerts. An hourly
    # ingest brings a fifth kernel stepping there. The step is now shared by five, so the four
    # untouched series' alerts are environment changes, as a full analysis says; counting
    # them without judging them again left them alerts until the daily analysis.
    kernels = ["rms_norm", "swiglu", "geglu", "layer_norm", "softmax"]
    wh = build_warehouse(tmp_path, [series_rows(STEP, kernel=k) for k in kernels[:4]])
    full = run_regressions(wh, workers=1)
    assert [(c["state"], c["kernels_at_step"]) for c in full.changes] == [("alert", 4)] * 4
    write_csv(tmp_path / "later" / "d.csv", series_rows(STEP, kernel=kernels[4], day=3))
    ingest(str(tmp_path / "later"), wh, IngestOptions(trigger=False))

    hourly = run_regressions(wh, workers=1, after_seq=full.seq)
    assert hourly.incremental
    assert sorted((c["kernel"], c["state"], c["kernels_at_step"]) for c in hourly.new) == [
        (k, "environment", 5) for k in sorted(kernels)
    ]
    again = run_regressions(wh, workers=1)
    assert not again.incremental and again.new == []


def test_an_hourly_analysis_leaves_out_retracted_changes_of_the_untouched_series(
    tmp_path: Path,
) -> None:
    # As above, but three of the untouched kernels' changes were since retracted (a later
    # analysis of their series no longer found them): no analysis stands behind them, so at
    # the step only the two touched kernels count and their changes are not environment.
    from kindex_etl.analysis.publish import Scope, commit_changes, current_steps

    kernels = ["rms_norm", "swiglu", "geglu", "layer_norm", "softmax"]
    wh = build_warehouse(tmp_path, [series_rows(STEP, kernel=k) for k in kernels])
    full = run_regressions(wh, workers=1)
    gone = [r for r in _regressions(wh) if r["kernel"] in kernels[2:]]
    retracted = [{**r, "state": "retracted"} for r in gone]
    scope = Scope(series=frozenset(str(r["series_key"]) for r in gone))
    seq, rows = commit_changes(open_store(wh), retracted, analysed_seq=full.seq, scope=scope)
    assert seq is not None and len(rows) == 3
    others = current_steps(open_store(wh))
    assert sorted(r["kernel"] for r in others) == sorted(kernels[:2])
    newer = ("0.10.0", "0.10.1", "0.11.0")
    later = [
        r for k in kernels[:2] for r in series_rows([0.13] * 3, kernel=k, releases=newer, day=3)
    ]
    write_csv(tmp_path / "later" / "d.csv", later)
    ingest(str(tmp_path / "later"), wh, IngestOptions(trigger=False))
    hourly = run_regressions(wh, workers=1, after_seq=seq)
    assert hourly.incremental
    assert [c["kernels_at_step"] for c in hourly.changes] == [2, 2]
    assert {c["state"] for c in hourly.changes} == {"alert"}


def test_the_workers_draw_the_pages_during_the_commit_and_none_is_put_if_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel pages are handed to the workers before the changes commit (they draw while
    the parent commits), and put in place only after it: a failed commit leaves no page."""
    import kindex_etl.analysis.publish as publish

    wh = build_warehouse(
        tmp_path,
        [series_rows(STEP), series_rows(SLOW_AT_6, x="4096"), series_rows(STEP, kernel="geglu")],
    )
    submitted: list[str] = []
    real_submit = Workers.submit

    def submit(self: Workers, fn: Callable[..., object], /, *args: object) -> object:
        submitted.append(fn.__name__)
        return real_submit(self, fn, *args)

    def failing_commit(*args: object, **kwargs: object) -> None:
        assert "_kernel_task" in submitted  # the pages are being drawn meanwhile
        raise OSError("the warehouse bucket is away")

    monkeypatch.setattr(Workers, "submit", submit)
    monkeypatch.setattr(publish, "commit_changes", failing_commit)
    with pytest.raises(OSError, match="bucket is away"):
        run_regressions(wh, workers=2, bucket_rows=8)
    assert not (Path(wh) / "reports").exists()

    monkeypatch.undo()
    done = run_regressions(wh, workers=2, bucket_rows=8)
    assert done.workers == 2 and done.commit is not None and len(done.alerts) >= 2
    assert {"index.html", "geglu.html"} <= set(_pages(wh))
