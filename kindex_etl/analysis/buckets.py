"""One bucket of whole series analysed, and the buckets spread over worker processes.

A bucket's analysis (series keys and points, the detector, its release points) needs nothing
from another bucket's: series never span buckets, and the controls that look across series
(`controls.mark_baseline_steps`, `mark_shared_steps`) run over every bucket's changes after.
With several `Workers`, each splits its share of the runs files into buckets (into its own
folder), then buckets are analysed one per task; the parent takes each bucket's changes and
points back in bucket order, so the result is the one a single process gets.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..extract.history import History
from ..storage import open_store
from ..workers import Workers, shared
from .calibration import TIMER, Calibration, SeriesClass
from .detect import detect, release_points
from .series import (
    RUN_COLUMNS,
    Machine,
    RunSource,
    Touched,
    read_bucket,
    version_order,
    with_series,
)


@dataclass(frozen=True)
class BucketWork:
    """What every bucket's analysis is given (sent to each worker once)."""

    calibration: Calibration
    families: Mapping[str, str]  # protocol digest -> family: which calibration class
    history: History
    floor: tuple[int, Any] | None = None  # `since` as `version_order`
    points: bool = False  # release points wanted (the report)


@dataclass
class Findings:
    """One bucket's: its runs and series, its changes (rows with their run ids) and points."""

    runs: int = 0
    series: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    points: list[pa.Table] = field(default_factory=list)


def analyse_bucket(bucket: pa.Table, work: BucketWork) -> Findings:
    """The changes (and release points) of one bucket of whole series (`with_series`'s)."""
    cal = work.calibration
    found = Findings(runs=bucket.num_rows)
    found.series = bucket.column("series_key").unique().to_pylist()
    for part, cls in by_class(bucket, cal, work.families):
        settings = cal.settings if cls is None else cls.settings
        rows = detect(part, settings, cal.false_alarm_rate, work.history)
        if cls is not None:
            for r in rows:
                r["series_class"] = f"{cls.name}/{r['operation_mode']}"
                r["false_alarm_rate"] = cls.false_alarm_rate
        if work.floor is not None:
            rows = [r for r in rows if version_order(r["after_release"]) >= work.floor]
        found.rows.extend(rows)
        if work.points:
            points = release_points(part, settings)
            if points.num_rows:
                # Which timer: comparisons keep to upstream's (analysis.compare).
                timer = TIMER if cls is None else cls.name
                points = points.append_column(
                    "timer", pa.array([timer] * points.num_rows, pa.string())
                )
                found.points.append(points)
        del part
    return found


def by_class(
    bucket: pa.Table, cal: Calibration, families: Mapping[str, str]
) -> Iterator[tuple[pa.Table, SeriesClass | None]]:
    """The bucket's runs of upstream's timer (class None), then each calibration class's (by
    the family of the series' protocol), each analysed with its own settings. Series never
    span two parts (the protocol is part of the key), and a class's controls, the other
    providers and passes measured in the same runs, are timed by the same timer."""
    if not cal.classes or bucket.num_rows == 0:
        yield bucket, None
        return
    digests = bucket.column("protocol_digest").combine_chunks().dictionary_encode()
    names = [families.get(d, "") for d in digests.dictionary.to_pylist()]
    classed = {c.family for c in cal.classes}
    if not classed.intersection(names):
        yield bucket, None  # upstream's timer only (nearly every bucket): no filter copy
        return
    family = pa.array(names, pa.string()).take(digests.indices)
    rest = pc.invert(pc.is_in(family, pa.array(sorted(classed), pa.string())))
    yield bucket.filter(rest), None
    for cls in cal.classes:
        part = bucket.filter(pc.equal(family, cls.family))
        if part.num_rows:
            yield part, cls


def analyse_buckets(
    source: RunSource, work: BucketWork, workers: Workers | None = None
) -> Iterator[Findings]:
    """Each bucket's findings, in bucket order: over `workers` for an analysis of more than
    one bucket (`worth_processes`), else in this process."""
    files = source.run_files
    rows = source.file_rows(files) if files else []
    digits = source.bucket_digits(rows)
    if workers is None or not workers.parallel or digits == 0 or not worth_processes(source, rows):
        for bucket in source.buckets(digits=digits):
            yield analyse_bucket(bucket, work)
            del bucket  # else it stays alive while the next one is read and sorted
        return
    state = workers.share(
        _State(source.store.url, source.snapshot, source.only, source.machines(),
               source.ranks(), work)
    )  # fmt: skip
    folder = workers.folder() / "series"
    shares = _shares(files, rows, workers.count)
    split = [
        workers.submit(_split_share, state, share, digits, str(folder / f"w{i}"), len(shares))
        for i, share in enumerate(shares)
    ]
    pieces: dict[str, list[str]] = {}
    for share in split:
        for path in share.result():
            pieces.setdefault(Path(path).stem, []).append(path)
    # Submitted all at once (every worker stays busy), taken back in bucket order: what waits
    # is a bucket's changes and points, not its runs. A future keeps its result: each is
    # dropped once taken, or every bucket's points would stay in memory until the last.
    jobs = deque(workers.submit(_analyse_pieces, state, pieces[name]) for name in sorted(pieces))
    while jobs:
        yield jobs.popleft().result()


def worth_processes(source: RunSource, rows: list[int]) -> bool:
    """Whether the runs to analyse are worth starting processes for (~1 s): a full analysis's
    are; an hourly one's (`source.only`) where its touched series likely hold more than two
    buckets' runs, estimated as their share of the warehouse's workloads times its runs.

    A per-commit file of upstream's touches most series: on 4.4M runs one touched 244 of 689
    workloads, 2.4M runs to read back, 18 s in this process and 13 s over two workers. Another
    touched 6 workloads, 73,000 runs: 3.8 s here and 4.7 s over two workers."""
    only = source.only
    if only is None:
        return True
    workloads = source.workload_count()
    touched = len(only.workloads)
    return workloads > 0 and sum(rows) * touched / workloads > 2 * source.bucket_rows


@dataclass(frozen=True)
class _State:
    """What a worker needs of the analysis (written once, `Workers.share`)."""

    url: str
    snapshot: dict[str, Any]
    only: Touched | None
    machines: Mapping[str, Machine]
    ranks: Mapping[str, int]
    work: BucketWork

    def source(self) -> RunSource:
        return RunSource(open_store(self.url), self.snapshot, history=self.work.history,
                         only=self.only)  # fmt: skip


def _split_share(
    state: str, files: list[str], digits: int, folder: str, processes: int
) -> list[str]:
    source = shared(state).source()
    paths = source.split(files, RUN_COLUMNS, digits, Path(folder), processes=processes)
    return [str(p) for p in paths]


def _analyse_pieces(state: str, pieces: list[str]) -> Findings:
    """One bucket, from the pieces each worker's split wrote of it (removed once read)."""
    s: _State = shared(state)
    tables = [read_bucket(Path(p)) for p in pieces]
    # Each worker's spill has its first file's schema; one process casts all to one.
    runs = pa.concat_tables([t.cast(tables[0].schema) for t in tables])
    bucket = with_series(runs, s.machines, s.ranks, s.work.history)
    del runs, tables
    for p in pieces:
        Path(p).unlink(missing_ok=True)
    return analyse_bucket(bucket, s.work)


def _shares(files: list[str], rows: list[int], count: int) -> list[list[str]]:
    """`files` dealt to `count` workers, largest first to the least loaded (files stay whole:
    on a bucket each is fetched by one worker)."""
    shares: list[list[str]] = [[] for _ in range(count)]
    load = [0] * count
    for key, n in sorted(zip(files, rows, strict=True), key=lambda f: (-f[1], f[0])):
        i = load.index(min(load))
        shares[i].append(key)
        load[i] += n
    return [s for s in shares if s]
