"""Starting a recorded re-run: one flow run per shard, all of one campaign."""

from __future__ import annotations

import uuid
from typing import Any

from kindex_etl.reruns.launch import start

DEPLOYMENT = "kindex-gpu-rerun-test/gpu-rerun"


def test_start_launches_one_flow_run_per_shard_with_one_campaign() -> None:
    calls: list[dict[str, Any]] = []

    def fake_run_deployment(name: str, **kwargs: Any) -> Any:
        calls.append({"name": name, **kwargs})
        return type("Run", (), {"id": uuid.uuid4(), "name": f"run-{len(calls)}"})()

    record: dict[str, Any] = {"version": "0.8.5", "baseline": "0.8.4"}
    start(record, DEPLOYMENT, "/wh", "/up", fake_run_deployment, shards=3)
    assert record["state"] == "started" and len(record["flowRunIds"]) == 3
    params = [c["parameters"] for c in calls]
    assert [p["shard_index"] for p in params] == [0, 1, 2]
    assert {p["shard_count"] for p in params} == {3}
    assert {p["campaign_id"] for p in params} == {record["campaignId"]}
    assert {p["baseline_version"] for p in params} == {"0.8.4"}
    assert len({c["idempotency_key"] for c in calls}) == 3
