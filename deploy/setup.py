"""Create (or update) what the deployments in deploy/prefect.yaml need on a Prefect server.

    python deploy/setup.py [--warehouse URL ...] [--print-commands]

- work pool `kindex-etl` (type process) for the ingest and backfill flows;
- work pool `kindex-gpu` (type kubernetes, base job template deploy/gpu-base-job-template.json:
  one Job per run holding `nvidia.com/gpu: 1`) for GPU re-runs;
- global concurrency limit `kindex-warehouse-<sha256(url)[:12]>`, limit 1, for each warehouse
  (--warehouse, else KINDEX_WAREHOUSE): writers of one warehouse queue on it.

The KINDEX_* settings set in this environment (kindex_etl/config.py) become the default `env`
of both pools, so a flow run finds its upstream and warehouse without editing prefect.yaml;
those marked HOST_ONLY there (this machine's local Prefect server) stay here.
Idempotent: run it again after changing them. `--print-commands` prints the equivalent
`prefect` CLI commands instead of calling the API. The server is PREFECT_API_URL's.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ETL_POOL = "kindex-etl"
GPU_POOL = "kindex-gpu"
GPU_TEMPLATE = HERE / "gpu-base-job-template.json"


def kindex_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The KINDEX_* settings that are set and belong in a pool, by environment variable name."""
    from kindex_etl.config import pool_setting_names

    environ = dict(os.environ if environ is None else environ)
    return {name: environ[name] for name in pool_setting_names() if environ.get(name)}


def with_env_default(template: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """A copy of a base job template whose `env` variable defaults to `env`."""
    out = copy.deepcopy(template)
    if env:
        out["variables"]["properties"]["env"]["default"] = dict(sorted(env.items()))
    return out


def pool_templates(env: dict[str, str]) -> dict[str, tuple[str, dict[str, Any]]]:
    from prefect.workers.process import ProcessWorker

    process = ProcessWorker.get_default_base_job_template()
    gpu = json.loads(GPU_TEMPLATE.read_text())
    return {
        ETL_POOL: ("process", with_env_default(process, env)),
        GPU_POOL: ("kubernetes", with_env_default(gpu, env)),
    }


def warehouses(given: Sequence[str], environ: dict[str, str] | None = None) -> list[str]:
    environ = dict(os.environ if environ is None else environ)
    if given:
        return list(given)
    return [environ["KINDEX_WAREHOUSE"]] if environ.get("KINDEX_WAREHOUSE") else []


def apply(warehouse_urls: Sequence[str], env: dict[str, str]) -> list[str]:
    """Create or update pools and limits through the API; returns what was done."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import (
        GlobalConcurrencyLimitCreate,
        GlobalConcurrencyLimitUpdate,
        WorkPoolCreate,
    )
    from prefect.exceptions import ObjectNotFound

    from flows.common import normalize_warehouse_url, warehouse_limit_name

    done = []
    with get_client(sync_client=True) as client:
        for name, (kind, template) in pool_templates(env).items():
            client.create_work_pool(
                WorkPoolCreate(name=name, type=kind, base_job_template=template), overwrite=True
            )
            done.append(f"work pool {name} ({kind})")
        for url in warehouse_urls:
            limit = warehouse_limit_name(url)
            try:
                client.read_global_concurrency_limit_by_name(limit)
                client.update_global_concurrency_limit(
                    limit, GlobalConcurrencyLimitUpdate(limit=1, active=True)
                )
            except ObjectNotFound:
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=limit, limit=1, active=True)
                )
            done.append(f"concurrency limit {limit} (limit 1) for {normalize_warehouse_url(url)}")
    return done


def commands(warehouse_urls: Sequence[str], env: dict[str, str], outdir: Path) -> list[str]:
    """The same setup as `prefect` CLI commands (templates written to `outdir`)."""
    from flows.common import warehouse_limit_name

    out = []
    for name, (kind, template) in pool_templates(env).items():
        path = outdir / f"{name}-base-job-template.json"
        path.write_text(json.dumps(template, indent=2) + "\n")
        out.append(
            f"prefect work-pool create {name} --type {kind} "
            f"--base-job-template {shlex.quote(str(path))} --overwrite"
        )
    for url in warehouse_urls:
        out.append(f"prefect gcl create {warehouse_limit_name(url)} --limit 1  # {url}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--warehouse", action="append", default=[],
        help="warehouse URL to make a concurrency limit for (repeatable)",
    )  # fmt: skip
    parser.add_argument("--print-commands", action="store_true",
                        help="print equivalent prefect CLI commands; change nothing")  # fmt: skip
    args = parser.parse_args(argv)
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))  # flows/ and kindex_etl/ from this checkout
    env = kindex_env()
    urls = warehouses(args.warehouse)
    if args.print_commands:
        outdir = Path(tempfile.mkdtemp(prefix="kindex-pools-"))
        print("\n".join(commands(urls, env, outdir)))
        return 0
    if not urls:
        print("no warehouse given (--warehouse or KINDEX_WAREHOUSE): no concurrency limit made",
              file=sys.stderr)  # fmt: skip
    for line in apply(urls, env):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
