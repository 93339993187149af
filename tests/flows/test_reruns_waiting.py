"""Issue 32: `kindex-etl reruns` said "started" of a GPU flow run waiting in a pool with no
worker. Real Prefect: a deployment in a pool nobody serves, the real `run_deployment`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import seed_row, write_csv

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_a_rerun_in_a_pool_with_no_worker_is_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    from kindex_etl import IngestOptions, ingest
    from kindex_etl.cli import main

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="gpu-nobody", type="process"), overwrite=True)
        flow_id = client.create_flow_from_name("kindex-gpu-rerun")
        client.create_deployment(
            flow_id=flow_id, name="waits", work_pool_name="gpu-nobody",
            entrypoint="flows/gpu_rerun.py:gpu_rerun_flow",
        )  # fmt: skip
    monkeypatch.setenv("KINDEX_RERUN_DEPLOYMENT", "kindex-gpu-rerun/waits")
    up, wh = tmp_path / "up", str(tmp_path / "wh")
    write_csv(up / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    ingest(str(up), wh, IngestOptions(trigger=False))

    argv = ["reruns", "--warehouse", wh, "--request", "0.8.1", "--upstream", str(up)]
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    (record,) = json.loads(capsys.readouterr().out)["reruns"]
    assert record["flowRunId"] and record["state"] == "waiting"
    assert record["waitingFor"] == ["gpu-nobody"] and record["flowRunStates"] == ["scheduled"]
    assert main(["reruns", "--warehouse", wh]) == 0
    out = capsys.readouterr().out
    assert "0.8.1: waiting " in out and "waiting for a worker of work pool gpu-nobody" in out
    assert "started" not in out
