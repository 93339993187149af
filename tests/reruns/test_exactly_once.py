"""Exactly once: racing and retried triggers on one warehouse, local and S3 (moto, 127.0.0.1)."""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from kindex_etl import open_warehouse
from kindex_etl.reruns import list_reruns, on_new_versions
from kindex_etl.reruns.launch import safe_error
from kindex_etl.reruns.requests import record_key
from kindex_etl.storage import open_store

from .helpers import FakePrefect

BEFORE = {"0.8.0", "0.8.1"}


def _race_threads(url: str, fake: FakePrefect, n: int = 8) -> list[list[dict[str, Any]]]:
    barrier = threading.Barrier(n)
    results: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            warehouse = open_warehouse(url)  # each its own client, as separate ingests would be
            barrier.wait()
            results[i] = on_new_versions(
                warehouse, BEFORE, ["0.8.5"], upstream="/up", **fake.kwargs()
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    return results


def _check_once(url: str, results: list[list[dict[str, Any]]], fake: FakePrefect) -> None:
    triggered = [entry for r in results for entry in r]
    assert len(triggered) == 1
    assert len(fake.calls) == 1 and len(fake.events) == 1
    (entry,) = triggered
    assert entry["version"] == "0.8.5" and entry["state"] == "started" and entry["flowRunId"]
    (record,) = list_reruns(open_store(url))
    assert record["flowRunId"] == entry["flowRunId"] and record["state"] == "started"
    name, kwargs = fake.calls[0]
    assert name == "kindex-gpu-rerun/gpu-rerun" and kwargs["timeout"] == 0
    assert kwargs["parameters"]["liger_version"] == "0.8.5"
    assert kwargs["parameters"]["upstream"] == "/up"
    event = fake.events[0]
    assert event["event"] == "kindex.liger_version.released"
    assert event["resource"]["prefect.resource.id"] == "kindex.liger-version.0.8.5"


def test_threads_race_local(tmp_path: Path) -> None:
    fake = FakePrefect()
    url = str(tmp_path / "wh")
    _check_once(url, _race_threads(url, fake), fake)


def test_threads_race_s3(s3_bucket: str) -> None:
    fake = FakePrefect()
    url = f"s3://{s3_bucket}/wh"
    _check_once(url, _race_threads(url, fake), fake)


def _process_trigger(url: str, start: Any, out: Any) -> None:
    warehouse = open_warehouse(url)
    start.wait()
    # No Prefect API in the child: the request is recorded for a manual run.
    result = on_new_versions(
        warehouse, BEFORE, ["0.8.5"], upstream="/up", api_url="", deployment=""
    )
    out.put(result)


def _race_processes(url: str, n: int = 2) -> list[list[dict[str, Any]]]:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_process_trigger, args=(url, start, out)) for _ in range(n)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_processes_race(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if where == "s3":
        url = f"s3://{request.getfixturevalue('s3_bucket')}/wh"
    else:
        url = str(tmp_path / "wh")
    results = _race_processes(url)
    triggered = [entry for r in results for entry in r]
    assert [e["version"] for e in triggered] == ["0.8.5"]
    assert triggered[0]["state"] == "manual"
    assert triggered[0]["howToRun"].startswith("kindex-etl rerun --version 0.8.5 --baseline ")
    assert " --upstream /up" in triggered[0]["howToRun"]
    assert len(list_reruns(open_store(url))) == 1


def test_retried_trigger_does_nothing_the_second_time(tmp_path: Path) -> None:
    fake = FakePrefect()
    warehouse = open_warehouse(str(tmp_path / "wh"))
    first = on_new_versions(warehouse, BEFORE, ["0.8.5"], **fake.kwargs())
    again = on_new_versions(warehouse, BEFORE, ["0.8.5"], **fake.kwargs())
    assert len(first) == 1 and again == [] and len(fake.calls) == 1


def test_failed_start_is_recorded_without_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_API_KEY", "pnu_supersecretvalue123")
    fake = FakePrefect(
        fail_with=RuntimeError(
            "POST https://bob:hunter2@api.example.com/api/deployments failed "
            "(api_key=sk-abc123, key pnu_supersecretvalue123)"
        )
    )
    warehouse = open_warehouse(str(tmp_path / "wh"))
    (entry,) = on_new_versions(warehouse, BEFORE, ["0.8.5"], upstream="/up", **fake.kwargs())
    assert entry["state"] == "failed-to-start" and entry["flowRunId"] is None
    assert entry["error"].startswith("RuntimeError: POST https://***@api.example.com")
    for secret in ("hunter2", "sk-abc123", "pnu_supersecretvalue123"):
        assert secret not in entry["error"]
    raw = warehouse.store.get_bytes(record_key("0.8.5")).decode()
    assert "hunter2" not in raw and json.loads(raw)["state"] == "failed-to-start"
    assert entry["howToRun"].startswith("kindex-etl rerun --version 0.8.5")
    # The record still blocks an automatic second attempt.
    assert on_new_versions(warehouse, BEFORE, ["0.8.5"], **fake.kwargs()) == []


def test_no_api_records_a_manual_request(tmp_path: Path) -> None:
    fake = FakePrefect()
    warehouse = open_warehouse(str(tmp_path / "wh"))
    kwargs: dict[str, Any] = {**fake.kwargs(), "api_url": ""}
    (entry,) = on_new_versions(warehouse, BEFORE, ["0.8.5"], upstream="s3://up/x", **kwargs)
    assert entry["state"] == "manual" and fake.calls == [] and fake.events == []
    assert entry["howToRun"] == (
        f"kindex-etl rerun --version 0.8.5 --baseline {max(BEFORE, key=Version)} "
        f"--upstream s3://up/x --warehouse {warehouse.store.url}"
    )


def test_api_without_deployment_announces_only(tmp_path: Path) -> None:
    fake = FakePrefect()
    warehouse = open_warehouse(str(tmp_path / "wh"))
    kwargs: dict[str, Any] = {**fake.kwargs(), "deployment": ""}
    (entry,) = on_new_versions(warehouse, BEFORE, ["0.8.5"], upstream="/up", **kwargs)
    assert entry["state"] == "announced" and fake.calls == [] and len(fake.events) == 1


def test_safe_error_masks_common_secret_shapes() -> None:
    masked: Callable[[str], str] = lambda m: safe_error(ValueError(m))  # noqa: E731
    assert "s3cr3t" not in masked("password=s3cr3t")
    assert "abc" not in masked("Authorization: abc")
    assert "tok123" not in masked("header Authorization: Bearer tok123")
    assert len(safe_error(ValueError("x" * 5000))) == 500
