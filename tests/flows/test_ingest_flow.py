"""The ingest flow on Prefect's real engine: summary, artifacts read back, warehouse slot."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.flows.conftest import Upstream, flow_run_artifacts, write_csv

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _bad_rows(upstream: Upstream) -> None:
    """One object with a GPU the catalog cannot place and a row with a non-numeric value."""
    import csv

    with (upstream.root / upstream.key(upstream.entries[0])).open(newline="") as fh:
        good = next(csv.DictReader(fh))
    unknown_gpu = {**good, "gpu_name": "Contoso Accelerator 9000", "x_value": "77777"}
    bad_value = {**good, "y_value_50": "fast", "x_value": "88888"}
    write_csv(upstream.root / "extra" / "bad.csv", [unknown_gpu, bad_value])


def test_ingest_flow_summary_and_artifacts(upstream: Upstream, tmp_path: Path) -> None:
    from flows.ingest import run_ingest_flow

    _bad_rows(upstream)
    warehouse = tmp_path / "warehouse"
    state = run_ingest_flow(
        upstream=str(upstream.root), warehouse=str(warehouse), return_state=True
    )
    assert state.is_completed()
    summary = state.result()
    n_objects = len(upstream.entries) + 2  # commit folders, the cumulative file, extra/bad.csv
    assert summary["objects_ingested"] == n_objects
    assert summary["runs_written"] > 0
    assert summary["quarantined_rows"] == 2
    assert sum(summary["quarantined_by_reason"].values()) == 2
    assert summary["new_versions"] == upstream.versions
    assert summary["reruns_triggered"] == []  # a first ingest has nothing to compare with
    assert summary["commits"] == [1]
    assert len(list((warehouse / "_kindex" / "log").glob("*.json"))) == 1

    artifacts = flow_run_artifacts(state)
    table = artifacts["kindex-ingest-objects"]
    assert table.type == "table"
    rows = json.loads(table.data)
    assert len(rows) == n_objects
    by_key = {r["object"]: r for r in rows}
    assert by_key["extra/bad.csv"]["quarantined"] == 2
    for entry in upstream.entries:
        row = by_key[upstream.key(entry)]
        assert row["rows"] == upstream.rows_by_folder[entry]
        assert row["size"] == (upstream.root / upstream.key(entry)).stat().st_size
    assert {"rows", "runs", "duplicates", "quarantined", "etag", "status"} <= set(rows[0])
    assert sum(r["runs"] for r in rows) == summary["runs_written"]
    assert sum(r["duplicates"] for r in rows) == summary["duplicate_rows"]
    assert sum(r["rows"] for r in rows) == summary["rows_read"]

    markdown = artifacts["kindex-ingest-summary"]
    assert markdown.type == "markdown"
    text = str(markdown.data)
    assert f"new liger versions: {', '.join(upstream.versions)}" in text
    assert "## Quarantined rows by reason" in text
    for reason, count in summary["quarantined_by_reason"].items():
        assert f"| {reason} | {count} |" in text
    assert "## GPU re-runs triggered" in text

    # Nothing new: the run still publishes both artifacts (an empty table).
    state = run_ingest_flow(
        upstream=str(upstream.root), warehouse=str(warehouse), return_state=True
    )
    assert state.result()["objects_ingested"] == 0
    artifacts = flow_run_artifacts(state)
    assert json.loads(artifacts["kindex-ingest-objects"].data) == []
    assert "new liger versions: none" in str(artifacts["kindex-ingest-summary"].data)


def test_ingest_flow_backfill_never_triggers(upstream: Upstream, tmp_path: Path) -> None:
    from flows.ingest import run_ingest_flow

    warehouse = str(tmp_path / "warehouse")
    first = upstream.key(upstream.entries[0])
    run_ingest_flow(upstream=str(upstream.root), warehouse=warehouse, prefix=first)
    # --backfill through the ingest flow never triggers, even with trigger=True...
    summary = run_ingest_flow(
        upstream=str(upstream.root), warehouse=warehouse, prefix="benchmarks/", backfill=True
    )
    assert summary["new_versions"] == upstream.versions[1:]
    assert summary["reruns_triggered"] == []
    assert not (Path(warehouse) / "_kindex" / "reruns").exists()


def test_ingests_of_one_warehouse_queue_on_its_concurrency_limit(
    upstream: Upstream, tmp_path: Path
) -> None:
    """With the limit created (deploy/setup.py does), an ingest waits while the slot is held."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.sync import concurrency

    from flows.ingest import run_ingest_flow, warehouse_limit_name

    warehouse = tmp_path / "warehouse"
    name = warehouse_limit_name(str(warehouse))
    assert name == warehouse_limit_name(f"file://{warehouse}/")  # one limit per warehouse
    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))

    result: dict[str, object] = {}

    def run() -> None:
        result["summary"] = run_ingest_flow(upstream=str(upstream.root), warehouse=str(warehouse))

    with concurrency(name, occupy=1, strict=True):
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        time.sleep(3.0)
        assert worker.is_alive(), "the ingest did not wait for the held slot"
        assert not (warehouse / "_kindex" / "log").exists()
    worker.join(timeout=60)
    assert not worker.is_alive()
    summary = result["summary"]
    assert isinstance(summary, dict) and summary["runs_written"] > 0
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(name)
    assert limit.active_slots == 0


def test_mistakes_are_not_retried(upstream: Upstream, tmp_path: Path) -> None:
    """I/O tasks retry with backoff (2, 10, 30 s), but a ValueError fails at once."""
    from flows.ingest import plan, run_ingest_flow

    assert plan.retries == 3 and plan.retry_delay_seconds == [2, 10, 30]
    started = time.monotonic()
    state = run_ingest_flow(
        upstream=str(upstream.root), warehouse=str(tmp_path / "wh"), prefix="../x/",
        return_state=True,
    )  # fmt: skip
    assert state.is_failed()
    assert time.monotonic() - started < 10
    with pytest.raises(ValueError, match="unsafe object key"):
        state.result()


def test_a_run_shares_one_api_client_among_its_tasks_and_artifacts(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task run and artifact call would open its own client (an SSL context with the CA
    bundle and a version check, ~30 ms apiece): the run shares one (docs/performance.md)."""
    from prefect.client.orchestration import SyncPrefectClient

    from flows.ingest import run_ingest_flow

    opened: list[int] = []
    original = SyncPrefectClient.__init__

    def counting(self: SyncPrefectClient, *args: object, **kwargs: object) -> None:
        opened.append(1)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SyncPrefectClient, "__init__", counting)
    state = run_ingest_flow(
        upstream=str(upstream.root), warehouse=str(tmp_path / "w"), regressions=False,
        return_state=True,
    )  # fmt: skip
    during_run = len(opened)
    assert state.is_completed()
    assert len(state.result()["commits"]) == 1
    artifacts = flow_run_artifacts(state)
    assert {"kindex-ingest-progress", "kindex-ingest-objects", "kindex-ingest-summary"} <= set(
        artifacts
    )
    # The run's one, and the one Prefect's flow engine opens to look up its result storage
    # (9 in all when each of the 4 tasks and 4 artifact calls opened its own).
    assert during_run <= 2


def test_a_deployment_run_naming_another_warehouse_creates_its_limit(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Issue 32: deploy/setup.py creates the limit of the warehouses it is told of; a deployment
    run with another `warehouse` parameter ran without any ("Concurrency limits ... do not
    exist"). The run here is a deployment's flow run, executed as a worker executes it."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    from flows.ingest import ingest_flow, warehouse_limit_name

    warehouse = tmp_path / "another-warehouse"
    parameters = {"upstream": str(upstream.root), "warehouse": str(warehouse),
                  "regressions": False, "trigger": False}  # fmt: skip
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("kindex-ingest")
        deployment = client.create_deployment(flow_id=flow_id, name="elsewhere",
                                              entrypoint="flows/ingest.py:ingest_flow")  # fmt: skip
        flow_run = client.create_flow_run_from_deployment(deployment, parameters=parameters)
    asyncio.run(run_flow(ingest_flow, flow_run=flow_run, parameters=parameters))  # type: ignore[arg-type]
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(warehouse_limit_name(str(warehouse)))
        assert client.read_flow_run(flow_run.id).state.is_completed()  # type: ignore[union-attr]
    assert (limit.limit, limit.active, limit.active_slots) == (1, True, 0)


def test_a_scheduled_run_with_an_empty_prefix_fails_and_writes_nothing(
    upstream: Upstream, tmp_path: Path
) -> None:
    """Issue 54: a deployment's run with a mistyped prefix succeeded on nothing, every hour."""
    from flows.ingest import run_ingest_flow
    from kindex_etl.errors import EmptyUpstream

    warehouse = tmp_path / "wh"
    state = run_ingest_flow(
        upstream=str(upstream.root), warehouse=str(warehouse), prefix="benchmarsk/",
        return_state=True,
    )  # fmt: skip
    assert state.is_failed()
    with pytest.raises(EmptyUpstream, match=r"no CSV under .* \(prefix 'benchmarsk/'\)"):
        state.result()
    assert not warehouse.exists()
