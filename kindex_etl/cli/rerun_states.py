"""What a started GPU re-run is doing now, asked of Prefect: its record says only "started".

A re-run's flow runs wait in the `kindex-gpu` pool until a worker there takes them; with no
worker they wait for ever, and `kindex-etl reruns` said "started" (issue 32). The record keeps
what the ingest did; the listing adds the flow runs' present state.
"""

from __future__ import annotations

from typing import Any

# Prefect state types of a flow run no worker has taken yet.
_WAITING = {"SCHEDULED", "PENDING", "PAUSED"}
_LIVE = ("started", "running")


def needs_prefect(records: list[dict[str, Any]]) -> bool:
    return any(
        r.get("state") in _LIVE and r.get("flowRunIds", [r.get("flowRunId")]) for r in records
    )


def _flow_run_ids(record: dict[str, Any]) -> list[str]:
    ids = record.get("flowRunIds") or [record.get("flowRunId")]
    return [str(i) for i in ids if i]


def with_live_states(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`records`, each started one with `flowRunStates` and its `state` as Prefect has it:
    `waiting` while any of its flow runs waits for a worker (`waitingFor`: their pools)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    out = []
    with get_client(sync_client=True) as client:
        for record in records:
            ids = _flow_run_ids(record) if record.get("state") in _LIVE else []
            if not ids:
                out.append(record)
                continue
            states: list[str] = []
            pools: set[str] = set()
            for flow_run_id in ids:
                try:
                    run = client.read_flow_run(UUID(flow_run_id))
                except (ObjectNotFound, ValueError):
                    states.append("unknown")
                    continue
                kind = run.state.type.value if run.state is not None else "SCHEDULED"
                states.append(kind.lower())
                if kind in _WAITING:
                    pools.add(run.work_pool_name or "no work pool")
            live = dict(record, flowRunStates=states)
            if pools:
                live["state"] = "waiting"
                live["waitingFor"] = sorted(pools)
            elif all(s == "running" for s in states):
                live["state"] = "running"
            out.append(live)
    return out
