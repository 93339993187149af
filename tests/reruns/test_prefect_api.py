"""With a real Prefect API (prefect_test_harness sets PREFECT_API_URL): the trigger starts the
re-run deployment, records its flow run and emits the release event; the GPU re-run flow runs
with the STAND-IN harness and reports back into the request record.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect import flow

from kindex_etl import ingest, open_warehouse
from kindex_etl.reruns import EVENT_NAME, list_reruns, on_new_versions, prefect_api_url
from kindex_etl.storage import open_store

from ..gpu.conftest import STANDIN_VERSION, build_standin_sdist
from .helpers import add_release

pytestmark = pytest.mark.slow
DEPLOYMENT = "kindex-gpu-rerun-test/gpu-rerun"


@flow(name="kindex-gpu-rerun-test")
def trivial_rerun(
    liger_version: str, upstream: str | None = None, warehouse: str | None = None
) -> str:
    """A stand-in deployment target with the re-run flow's parameters; never executed here."""
    return liger_version


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prefect API on 127.0.0.1: the session's harness if one is up (tests/flows starts one),
    else our own. One API per process: Prefect's events worker keeps the API URL it first saw,
    so a second, nested harness would read events from a server they were not sent to.
    """
    active = prefect_api_url()
    if active and active.startswith("http://127.0.0.1"):
        trivial_rerun.to_deployment(name="gpu-rerun").apply()
        yield active
        return
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    saved = os.environ.get("PREFECT_HOME")
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    from prefect.testing.utilities import prefect_test_harness

    try:
        with prefect_test_harness(server_startup_timeout=60):
            trivial_rerun.to_deployment(name="gpu-rerun").apply()
            url = prefect_api_url()
            assert url and url.startswith("http://127.0.0.1")
            yield url
    finally:
        if saved is None:
            os.environ.pop("PREFECT_HOME", None)
        else:
            os.environ["PREFECT_HOME"] = saved


def _events(name: str, resource_id: str) -> list[dict[str, Any]]:
    from prefect.client.orchestration import get_client
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all()
    body = {"filter": {"event": {"name": [name]}, "resource": {"id": [resource_id]}}}
    with get_client(sync_client=True) as client:
        for _ in range(40):
            found = client.request("POST", "/events/filter", json=body).json()["events"]
            if found:
                return list(found)
            time.sleep(0.25)
    return []


def test_trigger_starts_the_deployment_and_emits_the_event(harness: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    warehouse = open_warehouse(str(tmp_path / "wh"))
    version = f"0.9.{uuid.uuid4().int % 10_000}"  # unique per test session's event store
    (entry,) = on_new_versions(
        warehouse, {"0.8.5"}, [version], upstream="/data/upstream", deployment=DEPLOYMENT
    )
    assert entry["state"] == "started" and entry["deployment"] == DEPLOYMENT
    (record,) = list_reruns(warehouse.store)
    assert record["flowRunId"] == entry["flowRunId"] and record["eventId"]

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(uuid.UUID(entry["flowRunId"]))
        deployment = client.read_deployment_by_name(DEPLOYMENT)
    assert run.deployment_id == deployment.id
    assert run.parameters == {
        "liger_version": version,
        "upstream": "/data/upstream",
        "warehouse": warehouse.store.url,
    }
    (event,) = _events(EVENT_NAME, f"kindex.liger-version.{version}")
    assert event["id"] == record["eventId"]
    assert event["payload"]["version"] == version
    assert event["payload"]["howToRun"] == record["howToRun"]

    # A retried or concurrent ingest finds the record: no second flow run.
    assert on_new_versions(warehouse, {"0.8.5"}, [version], deployment=DEPLOYMENT) == []


def test_missing_deployment_is_failed_to_start(harness: str, tmp_path: Path) -> None:
    warehouse = open_warehouse(str(tmp_path / "wh"))
    (entry,) = on_new_versions(warehouse, {"0.8.5"}, ["0.8.6"], deployment="no-such/deployment")
    assert entry["state"] == "failed-to-start" and entry["flowRunId"] is None
    assert "ObjectNotFound" in entry["error"] or "not found" in entry["error"].lower()


def test_cli_ingest_json_reports_the_started_rerun(
    harness: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kindex_etl.cli import main

    monkeypatch.setattr("kindex_etl.reruns.requests.rerun_deployment_name", lambda: DEPLOYMENT)
    up, wh = tmp_path / "up", tmp_path / "wh"
    add_release(up, "0.8.0")
    assert main(["ingest", "--upstream", str(up), "--warehouse", str(wh), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reruns_triggered"] == []
    add_release(up, "0.8.5", minute=1)
    assert main(["ingest", "--upstream", str(up), "--warehouse", str(wh), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["new_versions"] == ["0.8.5"]
    (entry,) = summary["reruns_triggered"]
    assert entry["version"] == "0.8.5" and entry["state"] == "started"
    assert uuid.UUID(entry["flowRunId"]) and entry["howToRun"].startswith("kindex-etl rerun")


def test_gpu_rerun_flow_with_the_standin_reports_back(harness: str, tmp_path: Path) -> None:
    from flows.gpu_rerun import gpu_rerun_flow

    sdist = build_standin_sdist(tmp_path / "dist")
    up, wh = tmp_path / "up", tmp_path / "wh"
    warehouse = open_warehouse(str(wh))
    on_new_versions(warehouse, {"0.8.0"}, [STANDIN_VERSION], upstream=str(up), api_url="")

    out = gpu_rerun_flow(
        liger_version=STANDIN_VERSION,
        upstream=str(up),
        sdist=str(sdist),
        warehouse=str(wh),
        require_gpu=False,  # the stand-in harness computes nothing: tests only
    )
    assert out["ok"] and out["rows"] == 32
    (record,) = list_reruns(open_store(str(wh)))
    assert record["state"] == "succeeded" and record["runId"] == out["run_id"]
    assert record["uploadedTo"] == out["uploaded_to"] and record["rows"] == 32

    # The next ingest turns the upload into documents (no new trigger: the version is known).
    shutil.copytree(up, tmp_path / "up2")
    summary = ingest(str(tmp_path / "up2"), str(wh))
    assert summary.runs_written == 32 and summary.reruns_triggered == []

    state = gpu_rerun_flow(
        liger_version=STANDIN_VERSION, upstream=str(up), sdist=str(sdist), return_state=True
    )
    assert state.is_failed()
    with pytest.raises(Exception, match="GPU"):
        state.result()
