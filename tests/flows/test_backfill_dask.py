"""The backfill fanned out over a real Dask cluster (two worker processes on 127.0.0.1).

Workers read and normalize, the flow process commits: the warehouse must hold what the
sequential backfill builds on the upstream layout whose cumulative file repeats every
per-commit file's rows, every object must be committed once, and the same backfill again
must commit nothing. (The plain functions, without Prefect: tests/ingestion/test_fanout.py.)
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.flows.conftest import Upstream
from tests.helpers import REPO

_spec = importlib.util.spec_from_file_location(
    "diff_warehouses", REPO / "scripts" / "diff_warehouses.py"
)
assert _spec is not None and _spec.loader is not None
diff_warehouses = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(diff_warehouses)

COUNTS = ("objects_ingested", "objects_rejected", "rows_read", "runs_written", "duplicate_rows",
          "quarantined_rows")  # fmt: skip


@pytest.fixture(scope="module")
def cluster(prefect_harness: None) -> Iterator[Any]:
    """Started after the harness: its worker processes inherit PREFECT_HOME and offline flags."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # on loopback, any free port
    ) as c:
        yield c


def _committed_objects(warehouse: Path) -> list[str]:
    keys: list[str] = []
    for record in sorted((warehouse / "_kindex" / "log").glob("*.json")):
        keys += [o["key"] for o in json.loads(record.read_text())["objects"]]
    return keys


def _normalized_here(cluster: Any) -> dict[str, bool]:
    from distributed import Client

    def has_normalizer() -> bool:
        from kindex_etl.ingestion import fanout

        return fanout._normalizer is not None

    with Client(cluster) as client:
        result: dict[str, bool] = client.run(has_normalizer)
    return result


@pytest.mark.slow
def test_backfill_on_dask_builds_the_sequential_warehouse(
    cluster: Any, upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect_dask import DaskTaskRunner

    from flows.backfill import backfill_flow
    from kindex_etl.ingestion import fanout

    up, seq, fan = str(upstream.root), tmp_path / "sequential", tmp_path / "dask"
    sequential = backfill_flow(upstream=up, warehouse=str(seq), objects_per_batch=2)

    monkeypatch.setattr(fanout, "_normalizer", None)  # nothing normalized in this process
    on_dask = backfill_flow.with_options(
        task_runner=DaskTaskRunner(address=cluster.scheduler_address)
    )
    fanned = on_dask(upstream=up, warehouse=str(fan), objects_per_batch=2)

    assert diff_warehouses.compare(str(seq), str(fan), set()) == []
    assert {k: fanned[k] for k in COUNTS} == {k: sequential[k] for k in COUNTS}
    assert len(fanned["commits"]) == len(sequential["commits"]) > 2
    # Every per-commit file, then the cumulative file (its copies of their rows are the
    # duplicates: the runs keep their commit, origin `ci`): each in exactly one commit.
    objects = _committed_objects(fan)
    assert objects[-1] == "benchmark/data/all_benchmark_data.csv"
    assert objects[0] == upstream.key(upstream.entries[0])
    expected = ["benchmark/data/all_benchmark_data.csv"] + [
        upstream.key(e) for e in upstream.entries
    ]
    assert sorted(objects) == sorted(expected)
    assert fanned["duplicate_rows"] == sum(upstream.rows_by_folder.values())
    # The normalizing ran on the Dask workers, not in the flow process.
    assert fanout._normalizer is None
    assert any(_normalized_here(cluster).values())

    again = on_dask(upstream=up, warehouse=str(fan), objects_per_batch=2)
    assert again["commits"] == [] and again["runs_written"] == 0
    assert again["duplicate_rows"] == fanned["runs_written"] + fanned["duplicate_rows"]
    assert _committed_objects(fan) == objects


def test_the_settings_choose_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect_dask import DaskTaskRunner

    from flows.backfill import dask_task_runner
    from kindex_etl.config import settings

    monkeypatch.delenv("KINDEX_DASK_ADDRESS", raising=False)
    monkeypatch.delenv("KINDEX_DASK_WORKERS", raising=False)
    assert dask_task_runner(settings()) is None  # the default: no Dask
    monkeypatch.setenv("KINDEX_DASK_WORKERS", "2")
    local = dask_task_runner(settings())
    assert isinstance(local, DaskTaskRunner) and local.address is None
    assert local.cluster_kwargs["n_workers"] == 2
    assert local.cluster_kwargs["host"] == "127.0.0.1"
    monkeypatch.setenv("KINDEX_DASK_ADDRESS", "tcp://127.0.0.1:8786")
    remote = dask_task_runner(settings())
    assert isinstance(remote, DaskTaskRunner) and remote.address == "tcp://127.0.0.1:8786"


_INTERRUPTED_BACKFILL = """
import os, signal, sys
import kindex_etl.ingestion.commit as commit
from kindex_etl.cli import main

real = commit.fault_point
def ctrl_c_after_the_first_commit(name):
    real(name)
    if name == "after_publish" and not os.environ.get("INTERRUPTED"):
        os.environ["INTERRUPTED"] = "1"
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends, while batches are on Dask
commit.fault_point = ctrl_c_after_the_first_commit
sys.exit(main(["backfill", "--upstream", sys.argv[1], "--warehouse", sys.argv[2],
               "--objects-per-batch", "1"]))
"""


@pytest.mark.slow
def test_ctrl_c_during_a_fan_out_keeps_whole_commits_and_the_next_run_finishes(
    cluster: Any, upstream: Upstream, tmp_path: Path
) -> None:
    # Ctrl-C to `kindex-etl backfill` while normalized batches wait on the Dask workers
    # (KINDEX_DASK_ADDRESS): it stops with 130 (no hang on the futures), the commit it was
    # making is whole and published, and the same backfill again commits the rest, each
    # object once, into the warehouse a sequential run builds.
    import os
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL
    from prefect_dask import DaskTaskRunner

    from flows.backfill import backfill_flow

    up, seq, fan = str(upstream.root), tmp_path / "sequential", tmp_path / "dask"
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()),
           "KINDEX_DASK_ADDRESS": cluster.scheduler_address}  # fmt: skip
    env.pop("INTERRUPTED", None)
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_BACKFILL, up, str(fan)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "interrupted" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    first = _committed_objects(fan)
    total = 1 + len(upstream.entries)
    assert len(first) == 1 < total  # stopped right after its first commit
    snapshot = json.loads((fan / "_kindex" / "snapshot.json").read_text())
    assert snapshot["seq"] == 1

    sequential = backfill_flow(upstream=up, warehouse=str(seq), objects_per_batch=1)
    on_dask = backfill_flow.with_options(
        task_runner=DaskTaskRunner(address=cluster.scheduler_address)
    )
    rest = on_dask(upstream=up, warehouse=str(fan), objects_per_batch=1)
    assert len(rest["commits"]) == total - 1
    objects = _committed_objects(fan)
    assert objects[0] == first[0] and len(objects) == len(set(objects)) == total
    assert diff_warehouses.compare(str(seq), str(fan), set()) == []
    assert sequential["runs_written"] == sum(
        json.loads(r.read_text())["counts"]["runs"]
        for r in (fan / "_kindex" / "log").glob("*.json")
    )
