"""`reprocess`: re-derive a whole warehouse with the current catalog, in one commit.

It must converge to what a fresh ingest of the same upstream rows builds with that catalog,
migrate warehouses written by main at 5ae26c4 (before workload semantics were catalog data),
need no upstream object, and change nothing when run twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kindex_etl import IngestOptions, ingest, load_catalog
from kindex_etl.ingestion.reprocess import reprocess
from tests.helpers import REPO, tree_digest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "warehouse-main-5ae26c4"
# The mtime the fixture's input had when main 5ae26c4 ingested it (its local ETag).
INPUT_MTIME = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
NO_TRIGGER = IngestOptions(trigger=False)

_spec = importlib.util.spec_from_file_location(
    "diff_warehouses", REPO / "scripts" / "diff_warehouses.py"
)
assert _spec is not None and _spec.loader is not None
diff_warehouses = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(diff_warehouses)


def _upstream(tmp_path: Path) -> Path:
    up = tmp_path / "upstream"
    shutil.copytree(FIXTURE / "upstream", up)
    csv = up / "benchmark" / "data" / "all_benchmark_data.csv"
    os.utime(csv, (INPUT_MTIME, INPUT_MTIME))
    return up


def _old_warehouse(tmp_path: Path) -> Path:
    wh = tmp_path / "old"
    shutil.copytree(FIXTURE / "warehouse", wh)
    return wh


def _same_content(a: str, b: str) -> None:
    assert diff_warehouses.compare(a, b, set()) == []


def test_reprocess_migrates_a_warehouse_built_by_main_5ae26c4(tmp_path: Path) -> None:
    up, old = _upstream(tmp_path), _old_warehouse(tmp_path)
    shutil.rmtree(up.parent / "upstream-gone", ignore_errors=True)
    fresh = tmp_path / "fresh"
    ingest(str(up), str(fresh), NO_TRIGGER)
    shutil.rmtree(up)  # reprocess needs no upstream object

    report = reprocess(str(old))
    assert report.commit == 2
    assert (report.runs_before, report.held_before) == (41, 11)
    # The ten dyt_beta rows are dyt runs now; the unplaceable GPU stays held back.
    assert report.released == 10 and report.runs_after == 51 and report.held_after == 1
    assert report.newly_held == 0 and report.moved > 0
    _same_content(str(old), str(fresh))


def test_reprocess_twice_changes_nothing(tmp_path: Path) -> None:
    old = _old_warehouse(tmp_path)
    reprocess(str(old))
    before = tree_digest(old)
    again = reprocess(str(old))
    assert again.commit is None and again.moved == again.released == again.newly_held == 0
    assert tree_digest(old) == before


def test_reprocess_after_a_catalog_change_of_the_new_code(tmp_path: Path) -> None:
    """A warehouse ingested with an earlier catalog (here: one without the dyt_beta rule and
    an older catalogVersion) converges to a fresh ingest with the current one."""
    up = _upstream(tmp_path)
    earlier = tmp_path / "earlier-catalog"
    earlier.mkdir()
    workloads = json.loads((REPO / "kindex_etl" / "catalog" / "workloads.json").read_text())
    workloads["catalogVersion"] = "2026-01-01.0"
    workloads["kernelNames"] = []
    (earlier / "workloads.json").write_text(json.dumps(workloads))
    wh, fresh = tmp_path / "wh", tmp_path / "fresh"
    ingest(str(up), str(wh), IngestOptions(trigger=False, catalog=load_catalog(earlier)))
    ingest(str(up), str(fresh), NO_TRIGGER)
    report = reprocess(str(wh))
    assert report.commit is not None and report.released == 10
    _same_content(str(wh), str(fresh))
    assert reprocess(str(wh)).commit is None


def test_reprocess_on_s3(tmp_path: Path, s3_bucket: str) -> None:
    from tests.warehouse import put_objects

    up = _upstream(tmp_path)
    old = f"s3://{s3_bucket}/wh"
    put_objects(old, {p.relative_to(FIXTURE / "warehouse").as_posix(): p.read_bytes()
                      for p in (FIXTURE / "warehouse").rglob("*") if p.is_file()
                      and not p.name.endswith(".kindex-lock")})  # fmt: skip
    fresh = tmp_path / "fresh"
    ingest(str(up), str(fresh), NO_TRIGGER)
    report = reprocess(old)
    assert report.commit is not None and report.released == 10
    _same_content(old, str(fresh))
    assert reprocess(old).commit is None


def test_reprocess_refuses_a_missing_warehouse(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not a directory"):
        reprocess(str(tmp_path / "nowhere"))
    assert not (tmp_path / "nowhere").exists()


def test_the_command_reports_what_moved_then_that_nothing_would(tmp_path: Path, capsys) -> None:
    from kindex_etl.cli import main

    old = _old_warehouse(tmp_path)
    assert main(["reprocess", "--warehouse", str(old), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["released"], first["newly_held"], first["commit"]) == (10, 0, 2)
    assert first["files_retired"] > 0 and first["moved"] == first["runs_before"] == 41
    assert main(["reprocess", "--warehouse", str(old)]) == 0
    assert "nothing would change: nothing committed" in capsys.readouterr().out
