"""The analysis end to end: read the committed runs, detect, commit new changes, report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from ..memory import pin_mmap_threshold
from ..storage import ObjectStore, open_store
from .calibration import Calibration, default_calibration
from .detect import release_points
from .series import RunSource, version_order

BUCKET_ROWS = 400_000


@dataclass
class Analysis:
    warehouse: str
    seq: int
    series: int = 0
    runs: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)
    new: list[dict[str, Any]] = field(default_factory=list)
    commit: int | None = None
    report: str | None = None
    elapsed_s: float = 0.0

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return [c for c in self.changes if c["state"] == "alert"]

    @property
    def new_alerts(self) -> list[dict[str, Any]]:
        return [c for c in self.new if c["state"] == "alert"]

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
            "commit": self.commit,
            "report": self.report,
            "elapsed_s": self.elapsed_s,
        }


def detect_changes(
    store: ObjectStore,
    *,
    calibration: Calibration | None = None,
    since: str | None = None,
    bucket_rows: int = BUCKET_ROWS,
    points: list[pa.Table] | None = None,
) -> Analysis:
    """Every change in the committed runs, one bucket of whole series at a time.

    `since`: only changes whose after-release is at or above it (PEP 440). When `points` is a
    list, each bucket's release points are appended to it (for the report and comparisons).
    """
    from .detect import detect

    started = time.perf_counter()
    cal = calibration or default_calibration()
    source = RunSource.open(store, bucket_rows=bucket_rows)
    result = Analysis(warehouse=store.url, seq=source.seq)
    floor = version_order(since) if since else None
    for bucket in source.buckets():
        result.runs += bucket.num_rows
        result.series += len(bucket.column("series_key").unique())
        rows = detect(bucket, cal.settings, cal.false_alarm_rate)
        if floor is not None:
            rows = [r for r in rows if version_order(r["after_release"]) >= floor]
        result.changes.extend(rows)
        if points is not None:
            points.append(release_points(bucket, cal.settings))
    result.changes.sort(key=lambda r: (r["kernel"], r["series_key"], r["after_release"]))
    result.elapsed_s = round(time.perf_counter() - started, 3)
    return result


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
) -> Analysis:
    """Detect, commit the changes that are new (or changed state), rewrite the report."""
    from .publish import commit_changes

    started = time.perf_counter()
    pin_mmap_threshold()  # bucket after bucket of whole series: as long-running as an ingest
    store = open_store(warehouse_url, create=write)
    points: list[pa.Table] | None = [] if report else None
    cal = calibration or default_calibration()
    result = detect_changes(store, calibration=cal, since=since, points=points)
    if write:
        result.commit, result.new = commit_changes(store, result.changes, analysed_seq=result.seq)
    else:
        from ..load.warehouse import Warehouse
        from .publish import known_states

        wh = Warehouse(store)
        wh.refresh()
        known = known_states(wh)
        result.new = [c for c in result.changes if known.get(c["change_id"]) != c["state"]]
    if report and write and points is not None:
        from ..report import write_report

        result.report = write_report(store, points_table(points), result.changes, cal, result.seq)
    result.elapsed_s = round(time.perf_counter() - started, 3)
    return result


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
