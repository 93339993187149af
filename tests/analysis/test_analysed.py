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


def test_without_the_record_an_hourly_analysis_runs_in_full(tmp_path: Path) -> None:
    # A warehouse older than the record, or loaded with --no-regressions: an hourly analysis
    # cannot know what was never looked at, so it looks at everything and writes the record.
    # A `since` analysis, which leaves out what is below its floor, writes none.
    wh = build_warehouse(tmp_path, [series_rows(STEP, kernel="rms_norm")])
    run_regressions(wh, since="0.9.0")
    assert analysed_through(open_store(wh)) is None
    _ingest(tmp_path, wh, "died", series_rows(STEP, kernel="swiglu"))
    hour = _ingest(tmp_path, wh, "hour", series_rows(FLAT, kernel="geglu"))
    result = run_regressions(wh, after_seq=hour - 1)
    assert not result.incremental and result.runs == 24
    assert _kernels(result.new) == {"swiglu", "rms_norm"}  # rms_norm's was below the floor
    assert analysed_through(open_store(wh)) == result.seq == hour
    again = run_regressions(wh, after_seq=hour)
    assert again.incremental and again.new == []


def test_after_a_bulk_load_without_analysis_an_hour_announces_only_what_a_full_one_would(
    tmp_path: Path,
) -> None:
    # Issue 54: five kernels step together in a bulk load ingested with --no-regressions (an
    # environment change); the next hour brings two of them. Its chained analysis used to see
    # those two alone, call them alerts and announce them; a full analysis says environment.
    kernels = ["rms_norm", "swiglu", "geglu", "layer_norm", "softmax"]
    wh = build_warehouse(tmp_path, [series_rows(STEP, kernel=k) for k in kernels])
    assert analysed_through(open_store(wh)) is None
    newer = ("0.10.0", "0.10.1", "0.11.0")
    rows = [r for k in kernels[:2] for r in series_rows([0.13] * 3, kernel=k, releases=newer,
                                                          day=3)]  # fmt: skip
    hour = _ingest(tmp_path, wh, "hour", rows)
    chained = run_regressions(wh, after_seq=hour - 1)
    announced = {c["change_id"] for c in chained.new if c["state"] == "alert"}
    full = run_regressions(wh, write=False)
    assert announced <= {c["change_id"] for c in full.changes if c["state"] == "alert"}
    assert {c["state"] for c in chained.changes} == {"environment"}
    assert announced == set()


def test_a_record_that_says_nothing_usable_is_no_record(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(FLAT)])
    store = open_store(wh)
    for data in (b"not json", b"[1]", b'{"seq": -1}', b'{"seq": "3"}'):
        store.put_bytes(KEY, data)
        assert analysed_through(store) is None
