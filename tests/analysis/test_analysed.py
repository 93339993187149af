"""An hourly analysis also looks at what an earlier ingest's analysis never did."""

from __future__ import annotations

import json
from pathlib import Path

from kindex_etl.analysis.analysed import KEY, analysed_through
from kindex_etl.analysis.run import run_regressions
from kindex_etl.api import IngestOptions, ingest
from kindex_etl.storage import open_store
from tests.analysis.helpers import build_warehouse, series_rows
from tests.helpers import write_csv

STEP = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]
FLAT = [0.1] * 8


def _seq(wh: str) -> int:
    return int(json.loads((Path(wh) / "_kindex/snapshot.json").read_text())["seq"])


def _ingest(tmp_path: Path, wh: str, name: str, rows: list[dict[str, str]]) -> int:
    write_csv(tmp_path / name / "benchmark.csv", rows)
    ingest(str(tmp_path / name), wh, IngestOptions(trigger=False))
    return _seq(wh)


def _kernels(result_changes: list[dict[str, object]]) -> set[object]:
    return {c["kernel"] for c in result_changes if c["state"] == "alert"}


def test_the_next_hour_analyses_an_ingest_whose_analysis_died(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP, kernel="rms_norm")])
    first = run_regressions(wh)  # the hourly analysis of the first ingest, or a daily one
    assert analysed_through(open_store(wh)) == first.seq == 1
    # An ingest commits a stepped series, and its analysis dies (or it ran --no-regressions).
    died = _ingest(tmp_path, wh, "died", series_rows(STEP, kernel="swiglu"))
    # The next hour commits something else; its analysis is asked from its own commit on.
    hour = _ingest(tmp_path, wh, "hour", series_rows(FLAT, kernel="geglu"))
    assert hour > died
    result = run_regressions(wh, after_seq=hour - 1)
    assert result.incremental
    assert _kernels(result.new) == {"swiglu"}  # announced now, not a day later
    assert result.runs == 16  # swiglu's and geglu's runs: rms_norm's were analysed before
    assert analysed_through(open_store(wh)) == result.seq == hour


def test_without_the_record_an_analysis_starts_from_its_own_ingest(tmp_path: Path) -> None:
    # A warehouse older than the record, or one whose record was lost: as before, until a
    # full analysis writes it. A `since` analysis, which leaves out what is below its floor,
    # writes none.
    wh = build_warehouse(tmp_path, [series_rows(STEP, kernel="rms_norm")])
    run_regressions(wh, since="0.9.0")
    assert analysed_through(open_store(wh)) is None
    _ingest(tmp_path, wh, "died", series_rows(STEP, kernel="swiglu"))
    hour = _ingest(tmp_path, wh, "hour", series_rows(FLAT, kernel="geglu"))
    result = run_regressions(wh, after_seq=hour - 1)
    assert result.runs == 8 and not result.new  # geglu's only: nothing says swiglu waits
    assert analysed_through(open_store(wh)) is None  # nor can it say swiglu was looked at
    full = run_regressions(wh)
    assert _kernels(full.new) == {"swiglu", "rms_norm"}  # rms_norm's was below the floor
    assert analysed_through(open_store(wh)) == full.seq


def test_a_record_that_says_nothing_usable_is_no_record(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(FLAT)])
    store = open_store(wh)
    for data in (b"not json", b"[1]", b'{"seq": -1}', b'{"seq": "3"}'):
        store.put_bytes(KEY, data)
        assert analysed_through(store) is None
