"""Start a recorded re-run through Prefect: the release event, and one flow run per shard.

`requests` creates the record exactly once; only its creator calls `emit` and `start` here,
and whatever happens is written into the record, never raised into the ingest.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

EVENT_NAME = "kindex.liger_version.released"
RESOURCE_PREFIX = "kindex.liger-version."

RunDeployment = Callable[..., Any]
EmitEvent = Callable[..., Any]


def utcnow() -> str:
    """UTC, millisecond ISO with `Z`: the records' timestamps, as the warehouse log writes them."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")
_SECRET_KV = re.compile(
    r"(?i)\b((?:api[_-]?key|access[_-]?key|secret[_-]?key|secret|token|password|"
    r"authorization)\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[^\s,;]+")
_SECRET_ENV = ("PREFECT_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


def safe_error(exc: BaseException, limit: int = 500) -> str:
    """`Type: message` with credentials masked: URL userinfo, key=value secrets, env secrets."""
    text = f"{type(exc).__name__}: {exc}"
    text = _USERINFO.sub(r"\1***@", text)
    text = _BEARER.sub(r"\1 ***", text)
    text = _SECRET_KV.sub(r"\1***", text)
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 6:
            text = text.replace(value, "***")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def start(
    record: dict[str, Any],
    deployment: str,
    warehouse_url: str,
    upstream: str | None,
    run_deployment: RunDeployment | None,
    *,
    shards: int | None = None,
) -> None:
    """One `run_deployment(..., timeout=0)` per shard; the outcome goes into `record`.

    Never raises. Each flow run gets `shard_index`/`shard_count` and measures its share of
    the suite (kindex_etl.gpu.plan.shard), on whichever host of the `kindex-gpu` pool takes it;
    all shards share one campaign id, so their uploads read as one campaign.
    """
    from kindex_etl.config import settings

    version = record["version"]
    count = shards if shards is not None else settings().rerun_shards
    campaign = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    runs: list[str] = []
    try:
        launch: RunDeployment
        if run_deployment is not None:
            launch = run_deployment
        else:
            from prefect.deployments import run_deployment as launch
        for index in range(count):
            parameters: dict[str, Any] = {
                "liger_version": version,
                "baseline_version": record.get("baseline"),
                "warehouse": warehouse_url,
                "shard_index": index,
                "shard_count": count,
                "campaign_id": campaign,
            }
            if upstream:
                parameters["upstream"] = upstream
            flow_run = launch(
                deployment,
                parameters=parameters,
                timeout=0,
                idempotency_key=f"kindex-rerun-{warehouse_url}-{version}-{index}-of-{count}",
                as_subflow=False,
            )
            runs.append(str(flow_run.id))
            record["flowRunName"] = record.get("flowRunName") or getattr(flow_run, "name", None)
        record["state"] = "started"
    except Exception as exc:  # any failure to start is recorded, never raised into the ingest
        record["state"] = "failed-to-start" if not runs else "started"
        record["error"] = safe_error(exc)
    record["campaignId"] = campaign
    record["flowRunId"] = runs[0] if runs else None
    record["flowRunIds"] = runs


def emit(record: dict[str, Any], emit_event: EmitEvent | None) -> str | None:
    """Announce the release as a Prefect event; returns the event id (None if not emitted)."""
    try:
        emit: EmitEvent
        if emit_event is not None:
            emit = emit_event
        else:
            from prefect.events import emit_event as emit
        event = emit(
            event=EVENT_NAME,
            resource={
                "prefect.resource.id": f"{RESOURCE_PREFIX}{record['version']}",
                "prefect.resource.name": f"liger-kernel {record['version']}",
            },
            payload={
                k: record[k] for k in ("version", "reason", "warehouse", "upstream", "howToRun")
            },
        )
    except Exception:  # an event is a courtesy; it never stops the re-run request
        return None
    return str(event.id) if event is not None else None
