"""The maintenance flow on Prefect's real engine: compaction then vacuum, in one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.maintenance import hourly_upstream, ingest_hourly, read_snapshot, view
from tests.warehouse import data_objects, log_records

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_maintenance_flow_compacts_then_vacuums(tmp_path: Path) -> None:
    from flows.maintenance import maintenance_flow

    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    seen = view(wh, read_snapshot(wh))
    state = maintenance_flow(warehouse=wh, retention_s=0.0, return_state=True)
    assert state.is_completed()
    out = state.result()
    assert out["compact"]["commit"] == 4 and out["vacuum"]["commit"] == 5
    kinds = [r.get("kind", "ingest") for r in log_records(wh)]
    assert kinds[3:5] == ["compact", "vacuum"] and out["analysis"]["report"]
    snap = read_snapshot(wh)
    assert set(data_objects(wh)) == {k for keys in snap["tables"].values() for k in keys}
    assert view(wh, snap) == seen


def test_the_maintenance_run_says_what_it_did(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Issue 32: the flow run logged nothing about what it did and published no artifact."""
    import logging

    from flows.maintenance import maintenance_flow
    from tests.flows.conftest import flow_run_artifacts

    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    with caplog.at_level(logging.INFO):
        state = maintenance_flow(warehouse=wh, retention_s=0.0, return_state=True)
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("compacted in commit 4: ") for m in logged), logged
    assert any(m.startswith("vacuumed in commit 5: ") for m in logged), logged
    text = str(flow_run_artifacts(state)["kindex-maintenance"].data)
    assert f"`{wh}`" in text and "compacted in commit 4" in text and "vacuumed in commit 5" in text


def test_the_daily_run_analyses_every_series(tmp_path: Path) -> None:
    """Hourly analyses see only the series they touched: they neither rewrite the report nor
    retract a change no analysis finds any more. The daily run does both (here: an alert a
    looser detector once committed)."""
    from flows.maintenance import maintenance_flow
    from tests.analysis.helpers import alert_no_longer_found

    wh, _ = alert_no_longer_found(tmp_path)
    assert not (Path(wh) / "reports" / "index.html").exists()
    out = maintenance_flow(warehouse=wh, retention_s=0.0)
    assert out["analysis"]["retracted"] == 1 and out["analysis"]["alerts"] == 0
    assert out["analysis"]["report"] == str(Path(wh) / "reports" / "index.html")
    assert (Path(wh) / "reports" / "index.html").is_file()
