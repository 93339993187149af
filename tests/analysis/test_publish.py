"""The regressions table and change documents, through the commit protocol; the CLI; S3."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow.dataset as ds
import pytest

from kindex_etl.analysis.run import detect_changes, run_regressions
from kindex_etl.analysis.schema import REGRESSIONS_SCHEMA
from kindex_etl.api import IngestOptions, ingest
from kindex_etl.cli import main
from kindex_etl.storage import open_store
from tests.analysis.helpers import RELEASES, build_warehouse, series_rows
from tests.helpers import read_jsonl_zst, write_csv

STEP = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]


def _snapshot(wh: str) -> dict:  # type: ignore[type-arg]
    return json.loads((Path(wh) / "_kindex/snapshot.json").read_text())


def test_changes_are_committed_once_and_read_back_like_other_tables(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    first = run_regressions(wh, report=False)
    assert first.commit == 2 and [c["state"] for c in first.new] == ["alert"]
    snap = _snapshot(wh)
    assert snap["seq"] == 2
    (key,) = snap["tables"]["regressions"]
    files = [f"{wh}/{k}" for k in snap["tables"]["regressions"]]
    row = duckdb.sql(
        "SELECT kernel, before_release, after_release, state, ratio, false_alarm_rate, "
        "warehouse_seq FROM read_parquet(?)",
        params=[files],
    ).fetchall()
    assert row[0][:4] == ("megatron_rms_norm", RELEASES[3], RELEASES[4], "alert")
    assert row[0][4] == pytest.approx(1.3, rel=1e-6) and row[0][6] == 1
    table = ds.dataset(f"{wh}/regressions", format="parquet").to_table()
    assert table.schema.equals(REGRESSIONS_SCHEMA)
    (doc,) = read_jsonl_zst(Path(wh) / snap["tables"]["documents/regressions"][0])
    assert doc["apiVersion"] == "kernelindex.dev/v1alpha1" and doc["kind"] == "PerformanceChange"
    assert doc["spec"]["afterRelease"] == RELEASES[4] and doc["spec"]["state"] == "alert"
    record = json.loads((Path(wh) / "_kindex/log/000000000002.json").read_text())
    assert record["objects"] == [] and record["files"][0]["key"] == key

    again = run_regressions(wh, report=False)
    assert again.commit is None and again.new == [] and len(again.changes) == 1
    assert _snapshot(wh)["seq"] == 2
    # An ingest after a regressions commit still works (the log holds both kinds of record).
    extra = tmp_path / "extra"
    write_csv(extra / "x.csv", series_rows([0.1], releases=("1.0.0",), x="999", day=28))
    summary = ingest(str(extra), wh, IngestOptions(trigger=False))
    assert summary.runs_written == 1


def test_pending_becomes_an_alert_when_the_next_release_confirms_it(tmp_path: Path) -> None:
    releases = RELEASES[:5]
    wh = build_warehouse(tmp_path, [series_rows([0.1] * 4 + [0.15], releases=releases)])
    first = run_regressions(wh, report=False)
    assert [c["state"] for c in first.new] == ["pending"]
    more = tmp_path / "more"
    write_csv(more / "b.csv", series_rows([0.15], releases=(RELEASES[5],), day=20))
    ingest(str(more), wh, IngestOptions(trigger=False))
    second = run_regressions(wh, report=False)
    assert [(c["state"], c["change_id"]) for c in second.new] == [
        ("alert", first.new[0]["change_id"])
    ]
    states = duckdb.sql(
        f"SELECT state, warehouse_seq FROM read_parquet('{wh}/regressions/*.parquet') "
        "ORDER BY warehouse_seq"
    ).fetchall()
    assert [s for s, _ in states] == ["pending", "alert"]
    # The current state, as docs/regressions.md reads it.
    current = duckdb.sql(
        f"SELECT state FROM read_parquet('{wh}/regressions/*.parquet') "
        "QUALIFY row_number() OVER (PARTITION BY change_id "
        "ORDER BY warehouse_seq DESC, written_seq DESC NULLS LAST) = 1"
    ).fetchall()
    assert current == [("alert",)]


def test_cli_regressions_json_since_and_dry_run(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    wh = build_warehouse(
        tmp_path, [series_rows(STEP), series_rows([0.1] * 6 + [0.2] * 2, x="4096", day=2)]
    )
    assert main(["regressions", "--warehouse", wh, "--json", "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["alerts"] == 2 and out["commit"] is None and out["report"] is None
    assert not list((Path(wh) / "regressions").glob("*.parquet"))  # its Delta table is empty
    # No analysis ever finished here: `--since` first pays the owed full analysis (issue 54),
    # which commits both changes; its own analysis then lists only what is above its floor.
    assert main(["regressions", "--warehouse", wh, "--json", "--since", RELEASES[5]]) == 0
    captured = capsys.readouterr()
    assert "is owed: running it first" in captured.err
    out = json.loads(captured.out)
    assert [c["after_release"] for c in out["changes"]] == [RELEASES[6]]
    assert out["commit"] is None and out["report"].endswith("reports/index.html")
    assert main(["regressions", "--warehouse", wh]) == 0
    text = capsys.readouterr().out
    assert "2 changes, 2 alerts (0 new)" in text and "false-alarm rate of speed/full" in text


def test_regressions_on_s3(tmp_path: Path, make_bucket: Callable[[], str], s3_client) -> None:  # type: ignore[no-untyped-def]
    bucket = make_bucket()
    up = tmp_path / "up"
    write_csv(up / "a.csv", series_rows(STEP))
    url = f"s3://{bucket}/wh"
    ingest(str(up), url, IngestOptions(trigger=False))
    result = run_regressions(url)
    assert result.commit == 2 and len(result.new_alerts) == 1
    assert result.report == f"{url}/reports/index.html"
    snap = json.loads(
        s3_client.get_object(Bucket=bucket, Key="wh/_kindex/snapshot.json")["Body"].read()
    )
    assert len(snap["tables"]["regressions"]) == 1
    page = s3_client.get_object(Bucket=bucket, Key="wh/reports/megatron_rms_norm.html")
    html = page["Body"].read()
    assert b'class="plot"' in html and b'<script src="plotly-' in html


def test_spilled_buckets_on_s3_find_what_one_bucket_finds(
    tmp_path: Path, make_bucket: Callable[[], str]
) -> None:
    # On a bucket the run files are fetched whole and then read a row group at a time into
    # the spill files: the same changes as reading the runs as one table.
    bucket = make_bucket()
    up = tmp_path / "up"
    write_csv(up / "a.csv", series_rows(STEP))
    write_csv(up / "b.csv", series_rows(STEP, x="4096"))
    url = f"s3://{bucket}/wh"
    ingest(str(up), url, IngestOptions(trigger=False))
    store = open_store(url)
    whole = detect_changes(store).changes
    spilled = detect_changes(store, bucket_rows=4).changes
    assert len(whole) == 2 and spilled == whole


def _stricter(min_effect: float):  # type: ignore[no-untyped-def]
    """The packaged calibration with a larger minimum effect: a detector revision."""
    from dataclasses import replace

    from kindex_etl.analysis.calibration import default_calibration

    cal = default_calibration()
    return replace(cal, settings=replace(cal.settings, min_effect=min_effect))


def _current(wh: str) -> dict[str, tuple[str, int]]:
    """change_id -> (state, warehouse_seq) of its latest row, as docs/tables.md reads it."""
    rows = duckdb.sql(
        f"SELECT change_id, state, warehouse_seq FROM read_parquet('{wh}/regressions/*.parquet')"
        " QUALIFY row_number() OVER (PARTITION BY change_id"
        " ORDER BY warehouse_seq DESC, written_seq DESC NULLS LAST) = 1"
    ).fetchall()
    return {cid: (state, seq) for cid, state, seq in rows}


def test_a_change_no_longer_found_is_retracted_once(tmp_path: Path) -> None:
    """A detector revision (here: a 40 % minimum effect) no longer finds the +30 % alert: the
    table said `alert` for ever before. Now a row of state `retracted` (its run ids kept) is
    current, said once; the change found again is an alert again."""
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    first = run_regressions(wh, report=False)
    (alert,) = first.new
    assert alert["state"] == "alert"

    dry = run_regressions(wh, report=False, write=False, calibration=_stricter(0.4))
    assert [(c["change_id"], c["state"]) for c in dry.new] == [(alert["change_id"], "retracted")]
    assert _current(wh) == {alert["change_id"]: ("alert", 1)}  # a dry run writes nothing

    second = run_regressions(wh, report=False, calibration=_stricter(0.4))
    assert second.changes == [] and second.commit == 3
    (gone,) = second.retracted
    assert gone["retracted_state"] == "alert" and second.as_dict()["retracted"] == 1
    # It says why, and what the change had been.
    assert gone["evidence"].startswith("retracted by the analysis of warehouse commit")
    assert "holds no such step any more" in gone["evidence"]
    assert "it had been: " in gone["evidence"]
    assert _current(wh) == {alert["change_id"]: ("retracted", first.seq + 1)}
    ((ratio, after, ids),) = duckdb.sql(
        f"SELECT ratio, after_release, len(after_run_ids) FROM read_parquet('{wh}/regressions/"
        "*.parquet') WHERE state = 'retracted'"
    ).fetchall()
    assert ratio == pytest.approx(alert["ratio"]) and after == alert["after_release"]
    assert ids == len(next(iter(first.full_changes()))["after_run_ids"]) > 0

    again = run_regressions(wh, report=False, calibration=_stricter(0.4))
    assert again.commit is None and again.new == []  # retracted once
    back = run_regressions(wh, report=False)
    assert [(c["change_id"], c["state"]) for c in back.new] == [(alert["change_id"], "alert")]
    assert _current(wh)[alert["change_id"]][0] == "alert"


def test_only_what_the_analysis_looked_at_is_retracted(tmp_path: Path) -> None:
    """An analysis with `since` above a change, or an hourly one that touched other series,
    did not look at it: not finding it there says nothing."""
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    (alert,) = run_regressions(wh, report=False).new
    above = run_regressions(wh, report=False, since=RELEASES[6], calibration=_stricter(0.4))
    assert above.new == [] and above.commit is None
    # An ingest of another series, then the hourly analysis of what it touched.
    seq = above.seq
    other = tmp_path / "other"
    write_csv(other / "o.csv", series_rows([0.2] * 8, x="777", day=25))
    ingest(str(other), wh, IngestOptions(trigger=False))
    hourly = run_regressions(wh, report=False, after_seq=seq, calibration=_stricter(0.4))
    assert hourly.incremental and hourly.retracted == []
    assert _current(wh)[alert["change_id"]][0] == "alert"
    full = run_regressions(wh, report=False, calibration=_stricter(0.4))
    assert [c["change_id"] for c in full.retracted] == [alert["change_id"]]


def test_retraction_after_compaction_reads_the_current_rows(tmp_path: Path) -> None:
    """Daily compaction merges the regressions files: the current row of a change is still the
    one with the highest warehouse_seq, and each change is retracted once."""
    from kindex_etl.maintenance import compact

    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    (first,) = run_regressions(wh, report=False).new
    other = tmp_path / "other"
    write_csv(other / "o.csv", series_rows(STEP, x="4096", day=25))
    ingest(str(other), wh, IngestOptions(trigger=False))
    (second,) = run_regressions(wh, report=False).new
    assert len(_snapshot(wh)["tables"]["regressions"]) == 2
    compact(wh)
    assert len(_snapshot(wh)["tables"]["regressions"]) == 1
    gone = run_regressions(wh, report=False, calibration=_stricter(0.4))
    assert sorted(c["change_id"] for c in gone.retracted) == sorted(
        [first["change_id"], second["change_id"]]
    )
    assert {state for state, _ in _current(wh).values()} == {"retracted"}
    assert run_regressions(wh, report=False, calibration=_stricter(0.4)).new == []


def test_a_stale_analysis_neither_retracts_nor_restates_what_a_later_one_wrote(
    tmp_path: Path,
) -> None:
    """A full analysis reads commit 1 and takes long; meanwhile an ingest and its hourly
    analysis commit an alert at warehouse_seq 2. The slow one, committing after, must not
    retract (nor announce the retraction of) a change it could not have seen."""
    from kindex_etl.analysis.publish import commit_changes

    wh = build_warehouse(tmp_path, [series_rows([0.1] * 8)])
    stale = detect_changes(open_store(wh))
    assert stale.changes == [] and stale.seq == 1
    step = tmp_path / "step"
    write_csv(step / "s.csv", series_rows(STEP, x="4096", day=25))
    ingest(str(step), wh, IngestOptions(trigger=False))
    (alert,) = run_regressions(wh, report=False).new
    seq, new = commit_changes(
        open_store(wh), stale.changes, analysed_seq=stale.seq, scope=stale.scope
    )
    assert (seq, new) == (None, [])
    assert _current(wh) == {alert["change_id"]: ("alert", 2)}


def test_retracting_a_change_written_before_a_column_existed(tmp_path: Path) -> None:
    """Regressions files of older warehouses lack columns added since (origin, the commit
    range, ...): the retraction repeats such a row with those as nulls instead of failing."""
    import pyarrow.parquet as pq

    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    (alert,) = run_regressions(wh, report=False).new
    (key,) = _snapshot(wh)["tables"]["regressions"]
    old = pq.read_table(Path(wh) / key)
    dropped = ["origin", "before_commit", "first_release", "written_seq"]
    pq.write_table(old.drop_columns(dropped), Path(wh) / key)
    gone = run_regressions(wh, report=False, calibration=_stricter(0.4))
    (row,) = gone.retracted
    assert row["change_id"] == alert["change_id"] and row["origin"] is None
    assert row["ratio"] == pytest.approx(alert["ratio"])
    assert row["written_seq"] == gone.commit == 3  # the old row ranks below it
    assert run_regressions(wh, report=False, calibration=_stricter(0.4)).new == []


def test_of_two_analyses_of_one_commit_the_row_written_later_is_current(tmp_path: Path) -> None:
    """Two analyses read the same commit at once and disagree: the first commits an alert, the
    second (a stricter detector) its retraction. Both rows have warehouse_seq 1; written_seq
    says which is current, for this package and for a reader following docs/tables.md, before
    and after the daily compaction merges the files (which reversed their order)."""
    from kindex_etl.analysis.publish import commit_changes, known_states
    from kindex_etl.load.warehouse import Warehouse
    from kindex_etl.maintenance import compact

    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    store = open_store(wh)
    loose = detect_changes(store)
    strict = detect_changes(store, calibration=_stricter(0.4))
    assert loose.seq == strict.seq == 1 and strict.changes == []
    seq, (alert,) = commit_changes(
        store, loose.changes, analysed_seq=loose.seq, attach=loose.run_ids.attach
    )
    assert (seq, alert["state"], alert["written_seq"]) == (2, "alert", 2)
    seq, (gone,) = commit_changes(store, strict.changes, analysed_seq=strict.seq)
    assert (seq, gone["state"], gone["written_seq"]) == (3, "retracted", 3)

    def states() -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
        warehouse = Warehouse(store)
        warehouse.refresh()
        return known_states(warehouse), _current(wh)

    cid = alert["change_id"]
    assert states() == ({cid: "retracted"}, {cid: ("retracted", 1)})
    compact(wh)
    assert len(_snapshot(wh)["tables"]["regressions"]) == 1
    assert states() == ({cid: "retracted"}, {cid: ("retracted", 1)})
    # The stricter analysis again: the retraction is current, so it is not said twice.
    again = run_regressions(wh, report=False, calibration=_stricter(0.4))
    assert again.commit is None and again.retracted == []


def test_a_report_that_cannot_be_started_does_not_keep_the_changes_from_committing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report is drafted before the commit (its pages drawn meanwhile). Reading the
    verdicts fails: the changes commit all the same, and the report is started again after the
    commit, where a lasting failure is raised and a passing one draws it."""
    import kindex_etl.report
    from kindex_etl.analysis.publish import known_states
    from kindex_etl.load.warehouse import Warehouse

    real = kindex_etl.report.read_verdicts
    calls: list[int] = []

    def failing(store: object) -> object:
        calls.append(1)
        if len(calls) == 1 or lasting:
            raise OSError("the triage table is away")
        return real(store)  # type: ignore[arg-type]

    monkeypatch.setattr(kindex_etl.report, "read_verdicts", failing)
    lasting = True
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    with pytest.raises(OSError, match="triage table is away"):
        run_regressions(wh)
    assert len(calls) == 2  # before the commit, and again after it
    warehouse = Warehouse(open_store(wh))
    warehouse.refresh()
    assert list(known_states(warehouse).values()) == ["alert"]
    assert not (Path(wh) / "reports" / "index.html").exists()

    lasting, calls[:] = False, []
    other = tmp_path / "other"
    write_csv(other / "o.csv", series_rows(STEP, x="4096", day=25))
    ingest(str(other), wh, IngestOptions(trigger=False))
    done = run_regressions(wh)
    assert len(calls) == 2 and done.commit is not None and len(done.new) == 1
    assert done.report is not None and Path(done.report).is_file()
