"""What an analysis keeps on disk: the changes' run ids, the report's release points."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from kindex_etl.analysis import publish
from kindex_etl.analysis.calibration import default_calibration
from kindex_etl.analysis.detect import detect, release_points
from kindex_etl.analysis.run import detect_changes, run_regressions
from kindex_etl.analysis.series import RunSource
from kindex_etl.analysis.spill import PointSpill, RunIdSpill
from kindex_etl.cli import main
from kindex_etl.storage import open_store
from tests.analysis.helpers import RELEASES, build_warehouse, series_rows
from tests.helpers import read_jsonl_zst

STEP = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]
SLOW_AT_6 = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.14, 0.14]


def _changes(n: int) -> list[dict[str, object]]:
    return [
        {
            "change_id": f"c{i}",
            "state": "alert",
            "before_run_ids": [f"run-{i}-a", f"run-{i}-b"][: 1 + i % 2],
            "after_run_ids": [f"run-{i}-z"] * i,
        }
        for i in range(n)
    ]


def test_run_ids_leave_the_rows_and_come_back_in_any_order_and_chunk() -> None:
    spill = RunIdSpill()
    rows = _changes(7)
    whole = [dict(r) for r in rows]
    spill.take(rows[:3])
    spill.take(rows[3:])
    assert all("before_run_ids" not in r and "after_run_ids" not in r for r in rows)
    assert len(spill) == 7
    order = [rows[i] for i in (6, 0, 3, 5, 1, 4, 2)]
    back = list(spill.attach(order, chunk=2))
    assert back == [whole[i] for i in (6, 0, 3, 5, 1, 4, 2)]
    # The rows handed in stay light; attach gives new dicts.
    assert all("before_run_ids" not in r for r in rows)
    # Once read, the file is whole: more rows would rewrite it under the ids already handed out.
    with pytest.raises(RuntimeError, match="read back already"):
        spill.take(_changes(9)[8:])
    assert list(spill.attach(order[:1])) == [whole[6]]
    spill.close()


def test_a_change_found_twice_is_an_error_and_an_unknown_one_has_no_runs() -> None:
    spill = RunIdSpill()
    spill.take(_changes(2))
    with pytest.raises(ValueError, match="found twice"):
        spill.take(_changes(1))
    (row,) = spill.attach([{"change_id": "elsewhere", "state": "alert"}])
    assert row["before_run_ids"] == [] and row["after_run_ids"] == []
    empty = RunIdSpill()
    assert list(empty.attach([])) == []
    spill.close()
    empty.close()


def test_spill_folders_are_removed_on_close_and_when_collected() -> None:
    spill, points = RunIdSpill(), PointSpill()
    spill.take(_changes(3))
    list(spill.attach([]))
    points.append(pa.table({"kernel": ["k"], "value": [1.0]}))
    folders = [spill._folder.path, points._folder.path]
    assert all(f.is_dir() and any(f.iterdir()) for f in folders)
    spill.close()
    points.close()
    assert not any(f.exists() for f in folders)
    again = RunIdSpill()
    again.take(_changes(1))
    folder = again._folder.path
    del again
    assert not folder.exists()


def test_points_are_split_by_kernel_and_read_back_one_kernel_at_a_time() -> None:
    spill = PointSpill()
    # Kernel names are data: one that looks like a path must not become one.
    kernels = ["rope", "../../etc/x", "rope", "swiglu"]
    spill.append(pa.table({"kernel": kernels[:2], "value": [1.0, 2.0]}))
    spill.append(pa.table({"kernel": kernels[2:], "value": [3.0, 4.0]}))
    spill.append(pa.table({"kernel": kernels[:2], "value": [1.0, 2.0]}).slice(0, 0))
    assert spill.kernels() == sorted({"rope", "../../etc/x", "swiglu"})
    frames = dict(spill.kernel_frames())
    assert frames["rope"]["value"].tolist() == [1.0, 3.0]
    assert frames["../../etc/x"]["value"].tolist() == [2.0]
    assert all(p.parent == spill._folder.path for p in spill._files.values())
    assert spill.table().num_rows == 4
    spill.close()


def test_the_spilled_points_are_the_buckets_release_points(tmp_path: Path) -> None:
    wh = build_warehouse(
        tmp_path,
        [series_rows(STEP), series_rows(STEP, x="4096"), series_rows(STEP, kernel="rms_norm")],
    )
    store = open_store(wh)
    settings = default_calibration().settings
    expected = pa.concat_tables(
        [release_points(b, settings) for b in RunSource.open(store, bucket_rows=4).buckets()]
    )
    spill = PointSpill()
    detect_changes(store, points=spill, bucket_rows=4)
    got = spill.table()
    key = [("kernel", "ascending"), ("series_key", "ascending"), ("release_rank", "ascending")]
    assert got.num_rows == expected.num_rows == 24
    assert set(got.column("timer").to_pylist()) == {"upstream"}  # no re-run's device time here
    assert got.drop_columns(["timer"]).sort_by(key).equals(expected.sort_by(key))
    spill.close()


def test_committed_changes_carry_the_run_ids_the_detector_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three changes staged one row at a time: each file row must get its own change's runs.
    monkeypatch.setattr(publish, "STAGE_CHUNK", 1)
    wh = build_warehouse(
        tmp_path,
        [series_rows(STEP), series_rows(SLOW_AT_6, x="4096"), series_rows(STEP, x="8192")],
    )
    store = open_store(wh)
    settings, cal = default_calibration().settings, default_calibration()
    found = {
        c["change_id"]: c
        for b in RunSource.open(store).buckets()
        for c in detect(b, settings, cal.false_alarm_rate)
    }
    result = run_regressions(wh, report=False)
    assert len(result.changes) == len(result.new) == len(found) == 3
    assert all("before_run_ids" not in c for c in result.changes + result.new)
    snap = json.loads((Path(wh) / "_kindex/snapshot.json").read_text())
    table = ds.dataset([f"{wh}/{k}" for k in snap["tables"]["regressions"]]).to_table()
    for row in table.to_pylist():
        want = found[row["change_id"]]
        assert row["before_run_ids"] == want["before_run_ids"]
        assert row["after_run_ids"] == want["after_run_ids"]
        assert row["warehouse_seq"] == 1
    assert table.column("change_id").to_pylist() == [c["change_id"] for c in result.new]
    # DuckDB reads the same lists, and the documents carry them too.
    ((n,),) = duckdb.sql(
        "SELECT count(*) FROM read_parquet(?) WHERE len(after_run_ids) > 0",
        params=[[f"{wh}/{k}" for k in snap["tables"]["regressions"]]],
    ).fetchall()
    assert n == 3
    docs = read_jsonl_zst(Path(wh) / snap["tables"]["documents/regressions"][0])
    assert {d["metadata"]["changeId"]: d["spec"]["afterRunIds"] for d in docs} == {
        k: v["after_run_ids"] for k, v in found.items()
    }


def test_json_output_has_whole_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP), series_rows(SLOW_AT_6, x="4096")])
    assert main(["regressions", "--warehouse", wh, "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(c["after_release"] for c in out["changes"]) == [RELEASES[4], RELEASES[6]]
    for c in out["changes"]:
        # One run per release, observed on the first of month (release index + 1).
        before, after = RELEASES.index(c["before_release"]), RELEASES.index(c["after_release"])
        (b,), (a,) = c["before_run_ids"], c["after_run_ids"]
        assert b.endswith(f"2026-{before + 1:02d}-01-10-00-00")
        assert a.endswith(f"2026-{after + 1:02d}-01-10-00-00")
    assert out["runs"] == 16 and out["alerts"] == 2 and out["new_changes"] == 2


def test_pieces_waiting_to_be_spilled_hold_no_more_than_the_budget(tmp_path: Path) -> None:
    """Pieces are slices of their row group: a skewed row group whose big bucket is written at
    once is still held whole by its small pieces. Every row group read counts against the
    budget until everything waiting is written (40 such row groups held 205 MiB against a
    budget that believed 1 MiB waited)."""
    import numpy as np

    from kindex_etl.analysis import series

    budget = 4 * 2**20
    rng = np.random.default_rng(0)
    rows = 50_000

    def row_group() -> pa.Table:
        names = np.where(
            rng.random(rows) < 0.995,
            "big",
            np.char.add("w", rng.integers(0, 200, rows).astype(str)),
        )
        return pa.table(
            {"kernel": ["k"] * rows, "operation_mode": ["full"] * rows, "metric": ["speed"] * rows,
             "workload_digest": names.tolist(), "protocol_digest": ["p"] * rows,
             "value": rng.random(rows), "other": rng.random(rows)}
        )  # fmt: skip

    before = pa.total_allocated_bytes()
    spill, size = None, 0
    for _ in range(20):
        table = row_group()
        size = table.nbytes
        spill = spill or series._BucketFiles(tmp_path, table.schema, budget)
        per_row = table.nbytes / table.num_rows
        for name, part in series._split_by_group(table, 2):
            spill.add(name, part, int(part.num_rows * per_row))
        del table, part
    held = pa.total_allocated_bytes() - before
    assert held <= budget + 2 * size, (held, size)
    assert spill is not None and len(spill.close()) > 100  # every bucket still written


def test_the_processes_that_split_at_once_hold_no_more_than_the_total_budget() -> None:
    from kindex_etl.analysis import series

    for processes in range(1, 17):
        each = series.spill_budget(processes)
        assert 0 < each <= series.SPILL_PROCESS_BYTES
        assert each * processes <= series.SPILL_TOTAL_BYTES
    # One process or two wait for the most a process may hold; eight share the total.
    assert series.spill_budget(1) == series.spill_budget(2) == series.SPILL_PROCESS_BYTES
    assert series.spill_budget(8) == series.SPILL_TOTAL_BYTES // 8
