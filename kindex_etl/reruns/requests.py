"""Request a GPU re-run for a new liger_version, exactly once per version per warehouse.

Exactly once: the request is a record `_kindex/reruns/<version>.json` in the warehouse, created
with a conditional put (`if_none_match=True`). Of any number of concurrent or retried ingests
that see the same new version, exactly one creates it; only that one emits the event and starts
the run, the others see PreconditionFailed and do nothing. The creator then updates the record
with `if_match` (the ETag its create returned) to say what happened.

Record fields: version, state, reason, requestedAt, updatedAt, requestedBy (host/pid),
warehouse, upstream, deployment, flowRunId, flowRunName, eventId, howToRun, error, and, once a
re-run reports back (`mark_finished`), runId, uploadedTo, rows.

States:
- `requested`   the record exists; starting is under way (a record left in this state means the
                process died between create and update: run `howToRun` by hand).
- `started`     `run_deployment(..., timeout=0)` created a flow run (`flowRunId`); not awaited.
- `failed-to-start`  run_deployment raised; `error` says why (type and message, credentials
                masked). The record still blocks a second automatic trigger: run `howToRun`.
- `announced`   a Prefect API is configured but no deployment (KINDEX_RERUN_DEPLOYMENT=""): the
                event was emitted for an automation to act on; nothing was started here.
- `manual`      no Prefect API is configured (the embedded default: the ephemeral server lives
                only as long as this process, and no worker could pick a run up): no event, no
                run; run `howToRun` by hand.
- `succeeded` / `failed`  set by the re-run itself when it was given the warehouse.

"A Prefect API is configured" means Prefect's PREFECT_API_URL setting is non-empty (from the
environment, the active profile, or temporary settings such as prefect_test_harness).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from collections.abc import Callable, Iterable
from typing import Any

from kindex_etl.contracts.versions import parse_version, version_key
from kindex_etl.load import layout
from kindex_etl.load.warehouse import Warehouse, open_warehouse
from kindex_etl.reruns.launch import EmitEvent, RunDeployment, emit, start, utcnow
from kindex_etl.reruns.policy import decide, is_requestable
from kindex_etl.storage import NotFound, ObjectStore, PreconditionFailed


def record_key(version: str) -> str:
    return f"{layout.RERUNS}{version}.json"


def prefect_api_url() -> str | None:
    """The configured Prefect API URL, or None on the embedded (ephemeral) default."""
    try:
        from prefect.settings import PREFECT_API_URL
    except ImportError:
        return None
    value = PREFECT_API_URL.value()
    return str(value) if value else None


def rerun_deployment_name() -> str:
    from kindex_etl.config import settings

    return settings().rerun_deployment


def baseline_for(versions: Iterable[str], version: str) -> str | None:
    """The release to measure `version` against: the newest older requestable one held."""
    v = parse_version(version)
    if v is None:
        return None
    older = [(p, x) for x in versions if (p := parse_version(x)) is not None and p < v]
    older = [(p, x) for p, x in older if is_requestable(x)]
    return max(older)[1] if older else None


def how_to_run(
    version: str,
    upstream: str | None,
    warehouse: str | None = None,
    baseline: str | None = None,
) -> str:
    """The command that runs this re-run by hand (on a GPU host), as the record keeps it."""
    parts = ["kindex-etl", "rerun", "--version", version]
    if baseline:
        parts += ["--baseline", baseline]
    parts += ["--upstream", upstream or "<upstream URL>"]
    if warehouse:
        parts += ["--warehouse", warehouse]
    return " ".join(shlex.quote(p) for p in parts)


def _dump(record: dict[str, Any]) -> bytes:
    return json.dumps(record, indent=1, sort_keys=True).encode()


def read_record(store: ObjectStore, version: str) -> tuple[dict[str, Any], str] | None:
    """(record, etag) or None. The ETag is read first, so a stale one only fails an update."""
    info = store.head(record_key(version))
    if info is None:
        return None
    try:
        return json.loads(store.get_bytes(record_key(version))), info.etag
    except NotFound:
        return None


def update_record(store: ObjectStore, version: str, **changes: Any) -> dict[str, Any] | None:
    """Merge `changes` into the record (read, then put with if_match; retried on a lost race)."""
    return change_record(store, version, lambda record: record.update(changes))


def change_record(
    store: ObjectStore, version: str, change: Callable[[dict[str, Any]], None]
) -> dict[str, Any] | None:
    """Apply `change` to the record in place and write it back with if_match (retried)."""
    for _ in range(10):
        found = read_record(store, version)
        if found is None:
            return None
        record, etag = found
        change(record)
        record["updatedAt"] = utcnow()
        try:
            store.put_bytes(record_key(version), _dump(record), if_match=etag)
            return record
        except PreconditionFailed:
            continue
    raise PreconditionFailed(f"{record_key(version)}: kept changing, update not applied")


def list_reruns(store: ObjectStore) -> list[dict[str, Any]]:
    """Every re-run request in the warehouse, oldest version first."""
    out = []
    for info in store.list(layout.RERUNS):
        if not info.key.endswith(".json"):
            continue
        try:
            record = json.loads(store.get_bytes(info.key))
        except (NotFound, ValueError):
            continue
        if isinstance(record, dict):
            out.append(record)

    return sorted(out, key=lambda r: version_key(str(r.get("version", ""))))


def summary_entry(record: dict[str, Any]) -> dict[str, Any]:
    """What an ingest summary says about a request it made."""
    keys = ("version", "state", "flowRunId", "howToRun", "reason", "error", "deployment")
    return {k: record.get(k) for k in keys if k in record}


def request_rerun(
    warehouse: Warehouse | ObjectStore,
    version: str,
    *,
    reason: str,
    upstream: str | None = None,
    deployment: str | None = None,
    api_url: str | None = None,
    run_deployment: RunDeployment | None = None,
    emit_event: EmitEvent | None = None,
    resolve_prefect: bool = True,
    baseline: str | None = None,
    shards: int | None = None,
) -> dict[str, Any] | None:
    """Record the request for `version` and start it; None when it was already requested.

    `deployment` / `api_url` default to KINDEX_RERUN_DEPLOYMENT and Prefect's PREFECT_API_URL
    (`resolve_prefect=False` leaves them as given). `run_deployment` / `emit_event` default to
    Prefect's own. `baseline` defaults to the newest older release the warehouse holds
    (`baseline_for`); `shards` (KINDEX_RERUN_SHARDS) flow runs are started, one per shard.
    """
    if not is_requestable(version):
        raise ValueError(f"cannot request a re-run of {version!r}: not a PyPI release version")
    store = warehouse.store if isinstance(warehouse, Warehouse) else warehouse
    if baseline is None and isinstance(warehouse, Warehouse):
        warehouse.refresh()
        baseline = baseline_for(warehouse.versions(), version)
    if resolve_prefect:
        deployment = deployment if deployment is not None else rerun_deployment_name()
        api_url = api_url if api_url is not None else prefect_api_url()
    now = utcnow()
    record: dict[str, Any] = {
        "version": version,
        "state": "requested",
        "reason": reason,
        "requestedAt": now,
        "updatedAt": now,
        "requestedBy": f"{socket.gethostname()}/{os.getpid()}",
        "warehouse": store.url,
        "upstream": upstream,
        "deployment": deployment or None,
        "flowRunId": None,
        "flowRunName": None,
        "eventId": None,
        "baseline": baseline,
        "howToRun": how_to_run(version, upstream, store.url, baseline),
        "error": None,
    }
    try:
        etag = store.put_bytes(record_key(version), _dump(record), if_none_match=True)
    except PreconditionFailed:
        return None  # another ingest (or an earlier attempt of this one) already asked

    if not api_url:
        record["state"] = "manual"
    else:
        record["eventId"] = emit(record, emit_event)
        if not deployment:
            record["state"] = "announced"
        else:
            start(record, deployment, store.url, upstream, run_deployment, shards=shards)
    record["updatedAt"] = utcnow()
    try:
        store.put_bytes(record_key(version), _dump(record), if_match=etag)
    except PreconditionFailed:
        # Only this writer creates the record; a lost update means someone edited it by hand.
        keys = ("state", "flowRunId", "flowRunIds", "flowRunName", "eventId", "error")
        changes = {k: record[k] for k in keys if k in record}
        update_record(store, version, **changes)
    return record


def on_new_versions(
    warehouse: Warehouse,
    versions_before: set[str],
    new_versions: Iterable[str],
    *,
    upstream: str | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Called by the ingest after its commits: request a re-run for each new release.

    Returns one summary entry (version, state, flowRunId, howToRun, ...) per request this call
    created; versions already requested elsewhere are not repeated. `kwargs` go to
    `request_rerun` (tests inject run_deployment / emit_event there).
    """
    out = []
    for decision in decide(versions_before, list(new_versions)):
        if not decision.trigger:
            continue
        record = request_rerun(
            warehouse, decision.version, reason=decision.reason, upstream=upstream,
            baseline=baseline_for(versions_before, decision.version), **kwargs,
        )  # fmt: skip
        if record is not None:
            out.append(summary_entry(record))
    return out


def mark_finished(
    warehouse_url: str,
    version: str,
    *,
    shard_index: int,
    shard_count: int,
    ok: bool,
    outcome: dict[str, Any],
) -> dict[str, Any] | None:
    """Let one shard of the re-run report back into its request.

    Each shard's outcome (campaignId, runIds, uploadedTo, rows, finishedAt) lands under
    `shards.<index>`; the record's `state` is `running` until every shard has reported, then
    `succeeded` when all were ok, else `failed`. `runIds` lists every shard's run ids.
    """

    def change(record: dict[str, Any]) -> None:
        shards = dict(record.get("shards") or {})
        shards[str(shard_index)] = {**outcome, "ok": ok}
        record["shards"] = shards
        record["shardCount"] = shard_count
        record["runId"] = outcome.get("campaignId")
        record["runIds"] = [i for s in shards.values() for i in s.get("runIds", [])]
        record["rows"] = sum(int(s.get("rows") or 0) for s in shards.values())
        if len(shards) < shard_count:
            record["state"] = "running"
        else:
            record["state"] = "succeeded" if all(s["ok"] for s in shards.values()) else "failed"

    return change_record(open_warehouse(warehouse_url, create=False).store, version, change)
