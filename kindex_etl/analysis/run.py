"""The analysis end to end: read the committed runs, detect, commit new changes, report."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any, Protocol

import pandas as pd
import pyarrow as pa

from ..extract.history import History, default_history
from ..memory import pin_mmap_threshold, release_unused_memory, use_bulk_arrow_pool
from ..scratch import remove_orphaned
from ..storage import ObjectStore, open_store
from ..workers import Workers
from .analysed import analysed_through, record_analysed
from .buckets import BucketWork, Findings, analyse_buckets
from .calibration import Calibration, default_calibration
from .controls import mark_baseline_steps, mark_shared_steps, unsettled
from .publish import Scope, announced_alerts, current_steps
from .rules import hold_announced
from .schema import RETRACTED
from .series import BUCKET_ROWS, RunSource, touched_by, touched_since, version_order
from .spill import PointSpill, RunIdSpill

if TYPE_CHECKING:
    from ..report import Draft


class PointSink(Protocol):
    def append(self, points: pa.Table, /) -> None: ...


@dataclass
class Analysis:
    """What an analysis found. `changes` and `new` are regressions-table rows without their
    two run-id lists, which stay on disk in `run_ids` (they grow with the runs: 2.4M ids for
    38,399 changes over 17.5M runs); `full_changes` gives whole rows back."""

    warehouse: str
    seq: int
    series: int = 0
    runs: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)
    new: list[dict[str, Any]] = field(default_factory=list)
    commit: int | None = None
    report: str | None = None
    elapsed_s: float = 0.0
    report_s: float = 0.0  # of elapsed_s, writing the report (issue 33's budget: a part of it)
    incremental: bool = False  # only the series recent ingests touched were analysed
    workers: int = 1  # processes that analysed the buckets (1: this one)
    since: str | None = None
    # The series this analysis looked at: a change of theirs it no longer finds is retracted.
    analysed_series: set[str] = field(default_factory=set, repr=False, compare=False)
    run_ids: RunIdSpill = field(default_factory=RunIdSpill, repr=False, compare=False)

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return [c for c in self.changes if c["state"] == "alert"]

    @property
    def new_alerts(self) -> list[dict[str, Any]]:
        return [c for c in self.new if c["state"] == "alert"]

    @property
    def retracted(self) -> list[dict[str, Any]]:
        """Changes an earlier analysis committed that this one no longer finds."""
        return [c for c in self.new if c["state"] == RETRACTED]

    @property
    def scope(self) -> Scope:
        series = frozenset(self.analysed_series) if self.incremental else None
        return Scope(series=series, since=self.since)

    def as_dict(self) -> dict[str, Any]:
        return {
            "warehouse": self.warehouse,
            "seq": self.seq,
            "series": self.series,
            "runs": self.runs,
            "changes": self.changes,
            "alerts": len(self.alerts),
            "new_changes": len(self.new),
            "new_alerts": len(self.new_alerts),
            "retracted": len(self.retracted),
            "commit": self.commit,
            "report": self.report,
            "elapsed_s": self.elapsed_s,
            "report_s": self.report_s,
            "incremental": self.incremental,
            "workers": self.workers,
        }

    def full_changes(self, rows: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
        """`rows` (default: every change) with `before_run_ids` and `after_run_ids`."""
        return self.run_ids.attach(self.changes if rows is None else rows)

    def write_json(self, out: IO[str], rows: list[dict[str, Any]] | None = None) -> None:
        """`as_dict()` as one JSON object (sorted keys), with whole change rows, streamed: the
        changes of a large warehouse are hundreds of MB of text. `rows`: the changes to list
        (default: all; `kindex-etl regressions --state ...` lists some, the counts stay)."""
        mark = "\x00changes\x00"
        text = json.dumps({**self.as_dict(), "changes": mark}, sort_keys=True, default=str)
        head, tail = text.split(json.dumps(mark), 1)
        out.write(head + "[")
        for i, row in enumerate(self.full_changes(rows)):
            out.write((", " if i else "") + json.dumps(row, sort_keys=True, default=str))
        out.write("]" + tail)


def detect_changes(
    store: ObjectStore,
    *,
    calibration: Calibration | None = None,
    since: str | None = None,
    bucket_rows: int = BUCKET_ROWS,
    points: PointSink | None = None,
    history: History | None = None,
    after_seq: int | None = None,
    workers: Workers | None = None,
) -> Analysis:
    """Every change in the committed runs, one bucket of whole series at a time.

    `since`: only changes whose after-release is at or above it (PEP 440). `after_seq`: only
    the series that ingests committed after that warehouse commit touched (all of them where
    the log cannot say); `Analysis.incremental` says which happened. When `points` is
    given (a list, a `PointSpill`), each bucket's release points are appended to it (for the
    report and comparisons) by a full analysis. The changes' run ids go to
    `Analysis.run_ids` bucket by bucket.
    `workers`: processes to analyse the buckets in (None: this one).
    """
    started = time.perf_counter()
    cal = calibration or default_calibration()
    hist = default_history() if history is None else history
    only = touched_since(store, after_seq) if after_seq is not None else None
    source = RunSource.open(store, bucket_rows=bucket_rows, history=hist, only=only)
    result = Analysis(
        warehouse=store.url, seq=source.seq, incremental=only is not None, since=since
    )
    work = BucketWork(
        calibration=cal,
        families=source.families() if cal.classes else {},
        history=hist,
        floor=version_order(since) if since else None,
        # An incremental analysis leaves the report as the last full one drew it: no points.
        points=points is not None and only is None,
    )
    _absorb(result, analyse_buckets(source, work, workers), points)
    mark_baseline_steps(result.changes)
    kernels, across = cal.settings.environment_kernels, cal.settings.environment_across
    # An hourly analysis sees the series its ingest touched: a step that many kernels share
    # is counted over the others' changes too, as the full analysis counts it (without them,
    # a per-commit file's ingest on 4.4M runs turned 290 environment steps into alerts).
    others: list[dict[str, Any]] = []
    announced: frozenset[str] | None = None
    if source.only is not None:
        current = current_steps(store)
        announced = frozenset(r["change_id"] for r in current if r["state"] == "alert")
        others = [r for r in current if r["series_key"] not in result.analysed_series]
        previous = [r for r in current if r["series_key"] in result.analysed_series]
        # And the touched series' changes move the others' counts: a change found at a step,
        # or gone from it, can take the others there across the threshold. Their series are
        # analysed too (once: what that finds is what the table held), as a full analysis
        # judges them; else their rows kept their state until the daily analysis (36 rows
        # after two hours on 4.4M runs). A group the first pass read is not read again.
        flagged = unsettled(result.changes, others, previous, kernels, across,
                            rule=cal.settings.class_rule, code=hist.source_changes)  # fmt: skip
        again = touched_by(flagged, besides=source.only)
        if again.groups:
            before = len(result.changes)
            _absorb(result, analyse_buckets(replace(source, only=again), work, workers), points)
            mark_baseline_steps(result.changes[before:])
            others = [r for r in others if r["series_key"] not in result.analysed_series]
    mark_shared_steps(result.changes, kernels, across, context=others,
                      rule=cal.settings.class_rule, code=hist.source_changes)  # fmt: skip
    # The hour read every change's current row already; a full analysis reads the states.
    hold_announced(result.changes, announced_alerts(store) if announced is None else announced)
    result.changes.sort(key=lambda r: (r["kernel"], r["series_key"], r["after_release"]))
    result.elapsed_s = round(time.perf_counter() - started, 3)
    return result


def _absorb(result: Analysis, buckets: Iterator[Findings], points: PointSink | None) -> None:
    for found in buckets:
        result.runs += found.runs
        result.series += len(found.series)
        result.analysed_series.update(found.series)
        result.run_ids.take(found.rows)
        result.changes.extend(found.rows)
        if points is not None:
            for part in found.points:
                points.append(part)


def points_table(points: list[pa.Table]) -> pa.Table:
    """The buckets' release points as one table (no columns when there are none)."""
    parts = [p for p in points if p.num_rows]
    return pa.concat_tables(parts) if parts else pa.table({})


def points_frame(points: list[pa.Table]) -> pd.DataFrame:
    table = points_table(points)
    return table.to_pandas() if table.num_rows else pd.DataFrame()


def run_regressions(
    warehouse_url: str,
    *,
    since: str | None = None,
    write: bool = True,
    report: bool = True,
    calibration: Calibration | None = None,
    history: History | None = None,
    after_seq: int | None = None,
    workers: int | None = None,
    bucket_rows: int = BUCKET_ROWS,
) -> Analysis:
    """Detect, commit the changes that are new (or changed state), rewrite the report.

    `after_seq`: analyse only the series touched by ingests after that commit (an hourly
    ingest's), or after the last commit an analysis looked through where that is earlier
    (`analysed`: an ingest whose analysis died is not left to the daily one); the report, a
    view of every series, is then left as the last full analysis wrote it. `workers`:
    processes for the buckets and the report's pages (default: `workers.worker_count()`;
    started only by a full analysis of more than one bucket)."""
    from .publish import commit_changes

    started = time.perf_counter()
    remove_orphaned()  # spills of analyses that were killed: up to gigabytes each
    pin_mmap_threshold()  # bucket after bucket of whole series: as long-running as an ingest
    release_unused_memory()  # what an ingest before it in this process left cached
    use_bulk_arrow_pool()
    store = open_store(warehouse_url, create=write)
    points = PointSpill() if report and write else None
    cal = calibration or default_calibration()
    through = analysed_through(store)
    if after_seq is not None:
        # From what an earlier analysis never looked at. Where no analysis ever finished (a
        # bulk load with --no-regressions, a warehouse older than the record) an hour's series
        # alone cannot see the steps the others share, and announced 13 alerts that a full
        # analysis called environment: in full.
        after_seq = None if through is None else min(after_seq, through)
    pool = Workers(workers)
    try:
        result = detect_changes(
            store,
            calibration=cal,
            since=since,
            points=points,
            history=history,
            after_seq=after_seq,
            workers=pool,
            bucket_rows=bucket_rows,
        )
        result.workers = pool.count if pool.started else 1
        # An incremental analysis leaves the report as the last full one drew it.
        report_points = points if not result.incremental else None
        drafting_s = 0.0
        draft: Draft | None = None
        if report_points is not None:
            report_started = time.perf_counter()
            # The workers draw the kernel pages while this process commits the changes; the
            # pages are put in place after the commit, so a report never shows changes the
            # warehouse does not hold. A report, a derived view, must not keep the changes
            # from being committed: one that cannot be started here is started again after
            # the commit, where its error is raised as it always was.
            try:
                draft = _draft(store, report_points, result, cal, pool)
            except Exception:
                draft = None
            drafting_s = time.perf_counter() - report_started
        if write:
            result.commit, result.new = commit_changes(
                store,
                result.changes,
                analysed_seq=result.seq,
                attach=result.run_ids.attach,
                scope=result.scope,
            )
        else:
            from ..load.warehouse import Warehouse
            from .publish import new_rows

            wh = Warehouse(store)
            wh.refresh()
            result.new = new_rows(wh, result.changes, result.scope, result.seq)
        if report_points is not None:
            from ..report import write_report

            writing_started = time.perf_counter()
            if draft is None:
                draft = _draft(store, report_points, result, cal, pool)
            result.report = write_report(store, draft)
            # Drawing and writing: what the report alone cost this process's caller, the
            # commit it overlapped with left out.
            result.report_s = round(drafting_s + time.perf_counter() - writing_started, 3)
        if write and since is None and (through is not None or not result.incremental):
            # After the commit and the report: a crash before it only makes the next look
            # at more. A `since` analysis left out what is below its floor, and an
            # incremental one with no record to start from does not know what was looked at
            # before its ingest: they say nothing.
            record_analysed(store, result.seq)
    finally:
        pool.close()
        if points is not None:
            points.close()
    result.elapsed_s = round(time.perf_counter() - started, 3)
    return result


def _draft(
    store: ObjectStore, points: PointSpill, result: Analysis, cal: Calibration, pool: Workers
) -> Draft:
    from ..report import draft_report

    return draft_report(
        store,
        points,
        result.changes,
        cal,
        result.seq,
        attach=result.run_ids.attach,
        workers=pool if pool.started else None,
    )


def demo_report(warehouse_url: str) -> str:
    """For `kindex-etl demo`: bring the report up to date and say where to open it.

    Idempotent (changes already recorded are not committed again); returns a `file://` URI
    for a local warehouse, the object's URL on S3.
    """
    from pathlib import Path

    result = run_regressions(warehouse_url)
    assert result.report is not None
    if result.report.startswith("s3://"):
        return result.report
    return Path(result.report).resolve().as_uri()
