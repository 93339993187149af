"""The CLI as users run it: `python -m kindex_etl.cli` in a subprocess, one warm local server.

One Prefect server (the project's own local one, under a temporary KINDEX_STATE_DIR) serves
every test here that runs a flow: started once, stopped at the end with Prefect's command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "KINDEX_"))}
    env.update(
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        KINDEX_OFFLINE="1",
        PYTHONPATH=str(REPO),
        **extra,
    )
    return env


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kindex-state")


@pytest.fixture(scope="session")
def cli_env(state_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """No Prefect API configured: commands use the shared local server in state_dir."""
    home = tmp_path_factory.mktemp("home")
    return clean_env(KINDEX_STATE_DIR=str(state_dir), HOME=str(home))


@pytest.fixture(scope="session")
def warm_server(cli_env: dict[str, str], state_dir: Path) -> Iterator[str]:
    """Start the local server once for the session (as the first command would)."""
    from kindex_etl.cli.server import LocalServer

    saved = dict(os.environ)
    os.environ.update(cli_env)
    server = LocalServer(state_dir, idle_s=600)
    try:
        url, _ = server.ensure()
        server.release()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield url
    server.stop()


def kindex(
    env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kindex_etl.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def many_rows_upstream(root: Path, objects: int, rows: int) -> int:
    """`objects` upstream CSVs of `rows` distinct runs each (timestamps differ); returns all."""
    from tests.helpers import SEED_LINE

    header = (
        "kernel_name,kernel_provider,kernel_operation_mode,metric_name,metric_unit,x_name,"
        "x_label,x_value,y_value_50,y_value_20,y_value_80,extra_benchmark_config_str,gpu_name,"
        "timestamp,liger_version\n"
    )
    head, _, _ = SEED_LINE.rpartition(",2026-06-10 21:03:42,")
    for o in range(objects):
        lines = []
        for i in range(rows):
            n = o * rows + i
            day, rest = divmod(n, 86400)
            clock = f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
            ts = f"2026-{1 + day // 28:02d}-{1 + day % 28:02d} {clock}"
            lines.append(f"{head},{ts},0.8.0\n")
        path = root / "benchmarks" / f"{o:07x}-v0.8.0" / "benchmark.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + "".join(lines))
    return objects * rows


def flow_run_states(api_url: str, warehouse: Path) -> dict[str, list[str]]:
    """What Prefect's server says of the flow runs on `warehouse`: flow name -> state types
    (read from the server's REST API, not from this process)."""
    import httpx

    api = api_url.rstrip("/")
    runs = httpx.post(f"{api}/flow_runs/filter", json={"limit": 200}, timeout=10).json()
    names: dict[str, str] = {}
    states: dict[str, list[str]] = {}
    for run in runs:
        if run["parameters"].get("warehouse") != str(warehouse):
            continue
        flow_id = run["flow_id"]
        if flow_id not in names:
            names[flow_id] = httpx.get(f"{api}/flows/{flow_id}", timeout=10).json()["name"]
        states.setdefault(names[flow_id], []).append(run["state_type"])
    return states
