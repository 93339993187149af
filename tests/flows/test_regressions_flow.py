"""The regressions flow on Prefect's real engine: artifact, one event per new alert, chaining."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.analysis.helpers import RELEASES, build_warehouse, series_rows
from tests.flows.conftest import flow_run_artifacts
from tests.helpers import write_csv

pytestmark = pytest.mark.usefixtures("prefect_harness")

STEP = [0.1, 0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.13]


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import flows.regressions

    seen: list[dict[str, Any]] = []
    real = flows.regressions.emit_event

    def record(**kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(**kwargs)

    # Only the flow's own name: Prefect's engine emits its events through prefect.events.
    monkeypatch.setattr(flows.regressions, "emit_event", record)
    return seen


def test_new_alerts_become_an_artifact_and_events(tmp_path: Path, events: list) -> None:  # type: ignore[type-arg]
    from flows.regressions import regressions_flow

    wh = build_warehouse(tmp_path, [series_rows(STEP), series_rows(STEP, x="4096", day=2)])
    state = regressions_flow(warehouse=wh, return_state=True)
    result = state.result()
    assert result["new_alerts"] == 2 and result["commit"] == 2
    text = str(flow_run_artifacts(state)["kindex-regressions"].data)
    assert "## New alerts" in text and f"{RELEASES[3]} → {RELEASES[4]}" in text
    assert text.count("| megatron_rms_norm |") == 2
    assert [e["event"] for e in events] == ["kindex.regression.alert"] * 2
    assert {e["payload"]["after_release"] for e in events} == {RELEASES[4]}
    assert all(
        e["resource"]["prefect.resource.id"].startswith("kindex.series.sha256:") for e in events
    )

    events.clear()
    state = regressions_flow(warehouse=wh, return_state=True)
    assert state.result()["new_alerts"] == 0 and events == []
    assert "none" in str(flow_run_artifacts(state)["kindex-regressions"].data)


def test_ingest_flow_runs_regressions_after_a_commit(tmp_path: Path, events: list) -> None:  # type: ignore[type-arg]
    from flows.ingest import run_ingest_flow

    up = tmp_path / "up"
    write_csv(up / "benchmarks/a/benchmark.csv", series_rows(STEP))
    wh = tmp_path / "wh"
    summary = run_ingest_flow(upstream=str(up), warehouse=str(wh), trigger=False)
    assert summary["commits"] == [1]
    snap = json.loads((wh / "_kindex/snapshot.json").read_text())
    assert snap["seq"] == 2 and len(snap["tables"]["regressions"]) == 1
    assert (wh / "reports/index.html").is_file()
    assert len(events) == 1


def test_an_alert_no_longer_found_is_retracted_by_an_event(tmp_path: Path, events: list) -> None:  # type: ignore[type-arg]
    """Whoever heard `kindex.regression.alert` hears `kindex.regression.retracted` when an
    analysis no longer finds the change (here: an alert an older, looser detector raised)."""
    from flows.regressions import regressions_flow
    from tests.analysis.helpers import alert_no_longer_found

    wh, old = alert_no_longer_found(tmp_path)

    state = regressions_flow(warehouse=wh, return_state=True)
    result = state.result()
    assert result["changes"] == [] and result["retracted"] == 1
    (told,) = events
    assert told["event"] == "kindex.regression.retracted"
    assert told["payload"]["change_id"] == old["change_id"]
    assert told["payload"]["retracted_state"] == "alert"
    assert "retracted: 1 change(s)" in str(flow_run_artifacts(state)["kindex-regressions"].data)
