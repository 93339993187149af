"""The backfill flow: a dry run changes nothing, a run does what the dry run listed, progress,
triggers only when asked, and the `kindex-etl backfill` command. (What a selection picks is
tests/extract/test_select.py.)"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.flows.conftest import Upstream, flow_run_artifacts

# -- on Prefect's engine -----------------------------------------------------------------------


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def _log_objects(warehouse: Path) -> list[tuple[str, str]]:
    out = []
    for record in sorted((warehouse / "_kindex" / "log").glob("*.json")):
        out += [(o["key"], o["etag"]) for o in json.loads(record.read_text())["objects"]]
    return out


@pytest.mark.usefixtures("prefect_harness")
def test_dry_run_lists_then_backfill_does_exactly_that(upstream: Upstream, tmp_path: Path) -> None:
    from flows.backfill import PROGRESS_KEY, backfill_flow
    from kindex_etl.storage import open_store

    warehouse = tmp_path / "warehouse"
    first, last = upstream.entries[1], upstream.entries[3]  # the dev commit .. the 3rd release
    expected = sorted(upstream.key(e) for e in upstream.entries[1:4])
    store = open_store(str(upstream.root))

    # Dry run against a warehouse that does not exist: lists, creates nothing.
    dry = backfill_flow(
        upstream=str(upstream.root), warehouse=str(warehouse),
        from_commit=first, to_commit=last, dry_run=True,
    )  # fmt: skip
    assert not warehouse.exists()
    assert sorted(o["key"] for o in dry["objects"]) == expected
    for o in dry["objects"]:
        info = store.head(o["key"])
        assert info is not None
        assert (o["etag"], o["size"], o["status"]) == (info.etag, info.size, "would-ingest")
    assert dry["runs_written"] == 0 and dry["commits"] == []
    assert dry["selection"]["commits"] == upstream.entries[1:4]

    # The real backfill over the same range ingests exactly those objects, in one commit each
    # batch of two, and shows progress.
    state = backfill_flow(
        upstream=str(upstream.root), warehouse=str(warehouse),
        from_commit=first, to_commit=last, objects_per_batch=2, return_state=True,
    )  # fmt: skip
    done = state.result()
    assert sorted(o["key"] for o in done["objects"]) == expected
    assert sorted(_log_objects(warehouse)) == sorted((o["key"], o["etag"]) for o in dry["objects"])
    assert len(done["commits"]) == 2
    rows = sum(upstream.rows_by_folder[e] for e in upstream.entries[1:4])
    assert done["rows_read"] == rows
    assert done["runs_written"] + done["duplicate_rows"] + done["quarantined_rows"] == rows
    assert done["reruns_triggered"] == []
    artifacts = flow_run_artifacts(state)
    assert artifacts[PROGRESS_KEY].type == "progress"
    assert float(artifacts[PROGRESS_KEY].data) == 100.0
    table = json.loads(artifacts["kindex-backfill-objects"].data)
    assert sorted(r["object"] for r in table) == expected
    assert "kindex-backfill-summary" in artifacts

    import pandas as pd

    runs = pd.read_parquet(warehouse / "benchmark_runs", columns=["liger_version"])
    assert set(runs.liger_version.astype(str)) == set(upstream.versions[:3])

    # A dry run against the existing warehouse changes nothing in it, and says what it has.
    before = _tree(warehouse)
    again = backfill_flow(
        upstream=str(upstream.root), warehouse=str(warehouse), from_commit=first, dry_run=True
    )
    assert _tree(warehouse) == before
    known = {o["key"]: o["detail"] for o in again["objects"]}
    assert sorted(known) == sorted(upstream.key(e) for e in upstream.entries[1:])
    assert all(known[k].startswith("already in the warehouse") for k in expected)
    assert known[upstream.key(upstream.entries[-1])] == ""


@pytest.mark.usefixtures("prefect_harness")
def test_version_and_time_filters_select_objects(upstream: Upstream, tmp_path: Path) -> None:
    from flows.backfill import backfill_flow

    versions = upstream.versions
    by_version = backfill_flow(
        upstream=str(upstream.root), warehouse=str(tmp_path / "w1"),
        min_version=versions[1], max_version=f"v{versions[2]}", dry_run=True,
    )  # fmt: skip
    tagged = [e for e in upstream.entries if e.endswith((f"-v{versions[1]}", f"-v{versions[2]}"))]
    assert sorted(o["key"] for o in by_version["objects"]) == sorted(map(upstream.key, tagged))

    # Last-modified window: [since, until).
    stamps = {e: datetime(2026, 7, 1 + i, 12, tzinfo=UTC) for i, e in enumerate(upstream.entries)}
    for entry, when in stamps.items():
        os.utime(upstream.root / upstream.key(entry), (when.timestamp(), when.timestamp()))
    cumulative = upstream.root / "benchmark" / "data" / "all_benchmark_data.csv"
    old = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    os.utime(cumulative, (old, old))
    by_time = backfill_flow(
        upstream=str(upstream.root), warehouse=str(tmp_path / "w2"),
        since="2026-07-02", until="2026-07-04T12:00:00Z", dry_run=True,
    )  # fmt: skip
    assert sorted(o["key"] for o in by_time["objects"]) == sorted(
        upstream.key(e) for e in upstream.entries[1:3]
    )

    with pytest.raises(ValueError, match="not a version"):
        backfill_flow(upstream=str(upstream.root), warehouse=str(tmp_path / "w3"),
                      min_version="latest", dry_run=True)  # fmt: skip


@pytest.mark.usefixtures("prefect_harness")
def test_backfill_triggers_only_when_asked(upstream: Upstream, tmp_path: Path) -> None:
    from flows.backfill import backfill_flow

    warehouse = tmp_path / "warehouse"
    up, wh = str(upstream.root), str(warehouse)
    backfill_flow(upstream=up, warehouse=wh, to_commit=upstream.entries[0])
    quiet = backfill_flow(upstream=up, warehouse=wh, to_commit=upstream.entries[2])
    assert quiet["new_versions"] == upstream.versions[1:2]
    assert quiet["reruns_triggered"] == []
    assert not (warehouse / "_kindex" / "reruns").exists()

    asked = backfill_flow(upstream=up, warehouse=wh, to_commit=upstream.entries[3], trigger=True)
    assert asked["new_versions"] == upstream.versions[2:3]
    assert [r["version"] for r in asked["reruns_triggered"]] == upstream.versions[2:3]
    assert (warehouse / "_kindex" / "reruns").is_dir()


@pytest.mark.usefixtures("prefect_harness")
def test_cli_backfill_dry_run_and_run(
    upstream: Upstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kindex_etl.cli import main

    warehouse = tmp_path / "warehouse"
    args = ["backfill", "--upstream", str(upstream.root), "--warehouse", str(warehouse),
            "--from-commit", upstream.entries[2], "--to-commit", upstream.entries[2]]  # fmt: skip
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert upstream.key(upstream.entries[2]) in out and "nothing was changed" in out
    assert not warehouse.exists()

    assert main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [o["key"] for o in summary["objects"]] == [upstream.key(upstream.entries[2])]
    assert summary["rows_read"] == upstream.rows_by_folder[upstream.entries[2]]
    assert summary["runs_written"] > 0

    assert main([*args[:5], "--from-commit", "nope-not-there"]) == 2
    assert "not in benchmarks/commits.txt" in capsys.readouterr().err
