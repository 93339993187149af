"""With a real Prefect API (prefect_test_harness sets PREFECT_API_URL): the trigger starts the
re-run deployment, records its flow run and emits the release event; the GPU re-run flow runs
with the STAND-IN harness and reports back into the request record.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prefect import flow

from kindex_etl import IngestOptions, ingest, open_warehouse
from kindex_etl.reruns import (
    EVENT_NAME,
    list_reruns,
    on_new_versions,
    prefect_api_url,
    request_rerun,
)
from kindex_etl.storage import open_store

from ..gpu.conftest import BASELINE_VERSION, STANDIN_VERSION
from .helpers import add_release

pytestmark = pytest.mark.slow
DEPLOYMENT = "kindex-gpu-rerun-test/gpu-rerun"


@flow(name="kindex-gpu-rerun-test")
def trivial_rerun(
    liger_version: str,
    baseline_version: str | None = None,
    upstream: str | None = None,
    warehouse: str | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
    campaign_id: str | None = None,
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
        "baseline_version": "0.8.5",  # the newest release the warehouse held before
        "upstream": "/data/upstream",
        "warehouse": warehouse.store.url,
        "shard_index": 0,
        "shard_count": 1,
        "campaign_id": record["campaignId"],
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


def test_how_to_run_hands_off_and_the_record_ends_with_its_run_ids(
    harness: str,
    fake_pypi: Any,
    standin_gpus: Callable[[int], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kindex_etl.cli import main

    up, wh = tmp_path / "up", tmp_path / "wh"
    add_release(up, BASELINE_VERSION)
    ingest(str(up), str(wh), IngestOptions(trigger=False))
    record = request_rerun(
        open_warehouse(str(wh)), STANDIN_VERSION, reason="by hand", upstream=str(up),
        api_url="", resolve_prefect=False,
    )  # fmt: skip
    assert record is not None and record["state"] == "manual"
    assert record["baseline"] == BASELINE_VERSION  # the newest older release the warehouse holds
    argv = shlex.split(record["howToRun"])
    assert argv[:2] == ["kindex-etl", "rerun"]
    assert argv[argv.index("--warehouse") + 1] == open_store(str(wh)).url

    # Run exactly that command (in this process, so on the harness's API): the stand-in
    # harness comes from the fake index, the stand-in torch says there are 2 GPUs.
    monkeypatch.setenv("KINDEX_PYPI_URL", fake_pypi.url)
    monkeypatch.setenv("KINDEX_SDIST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KINDEX_RERUN_REPEATS", "1")
    standin_gpus(2)
    assert main(argv[1:]) == 0
    (done,) = list_reruns(open_store(str(wh)))
    assert done["state"] == "succeeded" and done["shards"]["0"]["ok"] is True
    assert len(done["runIds"]) == 2 and done["runId"] == done["shards"]["0"]["campaignId"]
    for run_id, version in zip(done["runIds"], (STANDIN_VERSION, BASELINE_VERSION), strict=True):
        assert (up / "reruns" / version / run_id / "benchmark.csv").is_file()

    # The next ingest turns both uploads into runs (no new trigger: both versions are known).
    summary = ingest(str(up), str(wh))
    assert summary.runs_written == done["rows"] and summary.reruns_triggered == []

    # The same command with a failing script still uploads, and the record says failed.
    monkeypatch.setenv("STANDIN_FAIL", "rms_norm")
    assert main(argv[1:]) == 1
    (failed,) = list_reruns(open_store(str(wh)))
    assert failed["state"] == "failed" and failed["runIds"] != done["runIds"]


def test_fan_out_over_four_gpus_one_script_per_gpu_at_a_time(
    harness: str,
    standin_sdist: Path,
    standin_gpus: Callable[[int], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect.client.orchestration import get_client

    from flows.gpu_rerun import gpu_limit_name, gpu_rerun_flow
    from kindex_etl.gpu.runner import CampaignResult

    standin_gpus(4)
    monkeypatch.setenv("STANDIN_SLEEP", "0.5")
    monkeypatch.setenv("STANDIN_TRACE", str(tmp_path / "trace"))
    monkeypatch.setenv("STANDIN_FAIL", "dyt")
    state = gpu_rerun_flow(
        liger_version=STANDIN_VERSION, upstream=str(tmp_path / "up"), sdist=str(standin_sdist),
        repeats=1, workdir=str(tmp_path / "w"), return_state=True,
    )  # fmt: skip
    assert state.is_failed()  # dyt failed; the campaign still ran and uploaded the rest
    result = CampaignResult.from_dict(state.result(raise_on_failure=False))
    (run,) = result.runs
    assert result.gpus == ["0", "1", "2", "3"] and len(run.slots) == 8
    assert {s.kernel: s.state for s in run.slots if not s.ok} == {"dyt": "exit 3"}
    assert run.uploaded_to and run.rows == sum(s.rows for s in run.slots) > 0

    def span(started: str | None, finished: str | None) -> tuple[float, float]:
        assert started and finished
        return datetime.fromisoformat(started).timestamp(), datetime.fromisoformat(
            finished
        ).timestamp()

    spans = {s.kernel: (s.gpu, *span(s.started_at, s.finished_at)) for s in run.slots}
    assert {g for g, _, _ in spans.values()} == {"0", "1", "2", "3"}
    for gpu in ("0", "1", "2", "3"):  # one script at a time on each GPU
        mine = sorted((a, b) for g, a, b in spans.values() if g == gpu)
        assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(mine))
    # ... and the GPUs worked at the same time.
    busy = max(sum(a <= t < b for _, a, b in spans.values()) for _, t, _ in spans.values())
    assert busy >= 2
    # Each script saw only its GPU.
    for line in (tmp_path / "trace").read_text().splitlines():
        kernel, _, visible, _, _ = line.split(",")
        assert visible == spans[kernel][0]
    with get_client(sync_client=True) as client:
        for gpu in ("0", "1", "2", "3"):
            assert client.read_global_concurrency_limit_by_name(gpu_limit_name(gpu)).limit == 1


def test_the_rerun_flow_times_device_time_when_asked(
    harness: str,
    standin_device: Callable[[], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """STAND-IN harness and device (CPU). The deployed re-run (deploy/prefect.yaml sets
    device_time) uploads device_time.csv beside benchmark.csv, through Prefect's engine (the
    stand-in device's scripts run only under the device-time launcher: without it, the flow's
    other tests cover the upload)."""
    from flows.gpu_rerun import gpu_rerun_flow
    from kindex_etl.gpu import device_time
    from kindex_etl.gpu.runner import CampaignResult

    from ..gpu.conftest import STANDIN_DEVICE_SDIST, build_standin_sdist

    standin_device()
    monkeypatch.setenv("STANDIN_SLOW_VERSION", STANDIN_VERSION)
    dist = tmp_path / "dist"
    common = {
        "liger_version": STANDIN_VERSION, "baseline_version": BASELINE_VERSION,
        "kernels": ["rms_norm"], "repeats": 1, "upstream": str(tmp_path / "up"),
        "sdist": str(build_standin_sdist(dist, STANDIN_VERSION, STANDIN_DEVICE_SDIST)),
        "baseline_sdist": str(build_standin_sdist(dist, BASELINE_VERSION, STANDIN_DEVICE_SDIST)),
    }  # fmt: skip
    state = gpu_rerun_flow(**common, workdir=str(tmp_path / "w"), device_time=True,
                           return_state=True)  # fmt: skip
    result = CampaignResult.from_dict(state.result())
    assert result.ok and len(result.runs) == 2
    for run in result.runs:
        names = [k.rsplit("/", 1)[-1] for k in run.uploaded_keys]
        assert names[-2:] == ["benchmark.csv", device_time.CSV_FILE]
