"""`kindex-etl compact` and `kindex-etl vacuum` as a user types them (in-process: no Prefect)."""

from __future__ import annotations

import json

from kindex_etl import IngestOptions, ingest
from kindex_etl.cli import main
from tests.helpers import write_csv
from tests.maintenance import hourly_upstream, ingest_hourly, read_snapshot, run_ids, view
from tests.warehouse import data_objects


def test_compact_then_vacuum_from_the_command_line(tmp_path, capsys):
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 4)
    ingest_hourly(upstream, wh)
    seen = view(wh, read_snapshot(wh))

    assert main(["compact", "--warehouse", wh, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["commit"] == 5 and out["files_before"]["benchmark_runs"] == 8
    assert out["files_after"]["benchmark_runs"] == 2  # one per release
    assert main(["compact", "--warehouse", wh, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["commit"] is None

    assert main(["vacuum", "--warehouse", wh, "--retention-s", "0", "--json"]) == 0
    vacuumed = json.loads(capsys.readouterr().out)
    assert vacuumed["commit"] == 6 and vacuumed["deleted"] > 0
    snap = read_snapshot(wh)
    assert set(data_objects(wh)) == {k for keys in snap["tables"].values() for k in keys}
    assert view(wh, snap) == seen and len(run_ids(seen)) == 48


def test_compact_of_a_missing_warehouse_fails_with_one_line(tmp_path, capsys):
    code = main(["compact", "--warehouse", "s3://", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("kindex-etl: error: ") and err.count("\n") == 1


def test_compact_after_two_chained_analyses(tmp_path, capsys):
    """Issue 32: the second hourly ingest's analysis leaves a second `regressions` file, and
    the daily compaction failed with KeyError: 'regressions'. Now it packs them like any table,
    and a reader sees the same changes before and after."""
    from kindex_etl.analysis.run import run_regressions
    from tests.analysis.helpers import build_warehouse, series_rows

    step = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]
    wh = build_warehouse(tmp_path, [series_rows(step)])
    assert run_regressions(wh, report=False).commit is not None
    more = tmp_path / "w-up" / "benchmarks" / "0001" / "benchmark.csv"
    write_csv(more, series_rows(step, x="4096", day=2))
    ingest(str(tmp_path / "w-up"), wh, IngestOptions(trigger=False))
    assert run_regressions(wh, report=False).commit is not None
    snap = read_snapshot(wh)
    assert len(snap["tables"]["regressions"]) == 2
    seen = view(wh, snap)

    assert main(["compact", "--warehouse", wh, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["files_before"]["regressions"] == 2 and out["files_after"]["regressions"] == 1
    assert view(wh, read_snapshot(wh)) == seen
