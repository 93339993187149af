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
    assert [r.get("kind", "ingest") for r in log_records(wh)][-2:] == ["compact", "vacuum"]
    snap = read_snapshot(wh)
    assert set(data_objects(wh)) == {k for keys in snap["tables"].values() for k in keys}
    assert view(wh, snap) == seen
