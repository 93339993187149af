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
    assert result["changes"] == 0 and result["retracted"] == 1
    (told,) = events
    assert told["event"] == "kindex.regression.retracted"
    assert told["payload"]["change_id"] == old["change_id"]
    assert told["payload"]["retracted_state"] == "alert"
    assert "retracted: 1 change(s)" in str(flow_run_artifacts(state)["kindex-regressions"].data)


def test_a_detect_task_retried_after_its_commit_still_announces_every_alert(
    tmp_path: Path,
    events: list,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report fails once after the changes were committed: Prefect retries the task, whose
    analysis then finds nothing new. Its alerts are announced all the same, once each."""
    import kindex_etl.report
    from flows.regressions import regressions_flow

    real = kindex_etl.report.write_report
    failures = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(1)
            raise OSError("the report's bucket is away")
        return real(*args, **kwargs)

    monkeypatch.setattr(kindex_etl.report, "write_report", flaky)
    wh = build_warehouse(tmp_path, [series_rows(STEP), series_rows(STEP, x="4096", day=2)])
    state = regressions_flow(warehouse=wh, return_state=True)
    result = state.result()
    assert failures == [1] and result["new_alerts"] == 0  # the retry found them committed
    assert result["announced"] == 2
    assert [e["event"] for e in events] == ["kindex.regression.alert"] * 2
    assert len({e["id"] for e in events}) == 2


def test_alerts_of_a_run_killed_before_it_told_anyone_are_told_by_the_next(
    tmp_path: Path,
    events: list,  # type: ignore[type-arg]
) -> None:
    from flows.regressions import regressions_flow
    from kindex_etl.analysis.run import run_regressions

    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    regressions_flow(warehouse=wh)
    (first,) = events
    up = tmp_path / "more"
    write_csv(up / "benchmarks/b/benchmark.csv", series_rows(STEP, x="4096", day=2))
    from kindex_etl.api import IngestOptions, ingest

    ingest(str(up), wh, IngestOptions(trigger=False))
    killed = run_regressions(wh)  # the commit landed; the process died before its events
    events.clear()

    state = regressions_flow(warehouse=wh, return_state=True)
    assert state.result()["new_alerts"] == 0
    (told,) = events
    assert told["payload"]["change_id"] == killed.new_alerts[0]["change_id"]
    assert told["id"] != first["id"]
    events.clear()
    regressions_flow(warehouse=wh)
    assert events == []


def _stored(ids: list[Any]) -> set[str]:
    """The ids among `ids` that the harness' Prefect server has stored, as a consumer asks."""
    from datetime import UTC, datetime, timedelta
    from uuid import UUID

    from kindex_etl.analysis.delivered import not_stored

    asked = [{"id": UUID(str(i))} for i in ids]
    missing = {str(e["id"]) for e in not_stored(asked, datetime.now(UTC) - timedelta(days=30))}
    return {str(i) for i in ids} - missing


def test_a_dropped_send_is_sent_again_before_the_mark_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefect's events worker drops an event whose send fails and still empties its queue.
    The first attempt's sends are dropped here: the server stores nothing, so the task fails
    and Prefect retries it, which sends the same ids again; the mark moves after that."""
    import flows.regressions
    from flows.regressions import regressions_flow
    from kindex_etl.analysis.announce import announced_through
    from kindex_etl.storage import open_store

    attempts: list[str] = []
    real = flows.regressions.emit_event

    def drop_first(**kwargs: Any) -> Any:
        attempts.append(str(kwargs["id"]))
        if len(attempts) <= 2:
            return object()  # "sent", as the worker says of a send it then drops
        return real(**kwargs)

    monkeypatch.setattr(flows.regressions, "emit_event", drop_first)
    monkeypatch.setenv("KINDEX_ANNOUNCE_CONFIRM_S", "2")
    wh = build_warehouse(tmp_path, [series_rows(STEP), series_rows(STEP, x="4096", day=2)])
    state = regressions_flow(warehouse=wh, return_state=True)

    assert state.result()["announced"] == 2
    assert len(attempts) == 4 and attempts[:2] == attempts[2:]  # sent again, same ids
    assert _stored(attempts[:2]) == set(attempts[:2])
    assert announced_through(open_store(wh)) == 2


def test_an_announcement_never_stored_fails_and_leaves_the_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flows.regressions
    from flows.regressions import regressions_flow
    from kindex_etl.analysis.announce import announced_through
    from kindex_etl.storage import open_store

    real = flows.regressions.emit_event
    monkeypatch.setattr(flows.regressions, "emit_event", lambda **kwargs: object())
    monkeypatch.setattr(
        flows.regressions, "announce", flows.regressions.announce.with_options(retries=0)
    )
    monkeypatch.setenv("KINDEX_ANNOUNCE_CONFIRM_S", "1")
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    state = regressions_flow(warehouse=wh, return_state=True)

    assert state.is_failed() and "has not stored 1 of 1" in str(state.message)
    assert announced_through(open_store(wh)) == 1  # set before the analysis; not moved
    told: list[Any] = []

    def send(**kwargs: Any) -> Any:
        told.append(kwargs["id"])
        return real(**kwargs)

    monkeypatch.setattr(flows.regressions, "emit_event", send)
    assert regressions_flow(warehouse=wh)["announced"] == 1
    assert _stored(told) == {str(i) for i in told} and announced_through(open_store(wh)) == 2


def test_what_an_earlier_attempt_got_stored_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt whose events were stored only after its confirmation gave up (a slow event
    persister) leaves the mark; the next run asks first and sends none of them again, so the
    server's automations, which remember the ids they acted on for a while only, fire once."""
    import time

    import flows.regressions
    from flows.regressions import regressions_flow
    from kindex_etl.analysis.announce import announced_through
    from kindex_etl.storage import open_store

    sent: list[str] = []
    real = flows.regressions.emit_event

    def send(**kwargs: Any) -> Any:
        sent.append(str(kwargs["id"]))
        return real(**kwargs)

    monkeypatch.setattr(flows.regressions, "emit_event", send)
    # The persister "too slow": the confirmation reports every event missing, once.
    monkeypatch.setattr(flows.regressions, "unconfirmed", lambda events, *_: list(events))
    monkeypatch.setattr(
        flows.regressions, "announce", flows.regressions.announce.with_options(retries=0)
    )
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    assert regressions_flow(warehouse=wh, return_state=True).is_failed()
    assert len(sent) == 1 and announced_through(open_store(wh)) == 1
    deadline = time.monotonic() + 30
    while _stored(sent) != set(sent) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _stored(sent) == set(sent)

    monkeypatch.undo()  # the real confirmation again, and a fresh spy on the sends
    monkeypatch.setattr(flows.regressions, "emit_event", send)
    assert regressions_flow(warehouse=wh)["announced"] == 1
    assert len(sent) == 1  # nothing sent twice
    assert announced_through(open_store(wh)) == 2
