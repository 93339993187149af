"""The ingest flow: recover, plan, one task per commit batch, trigger, report (flows/common.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prefect import flow

from flows.common import (
    analysis_subflow,
    owed_analysis_subflow,
    plan,
    run_ingest,
    warehouse_limit_name,
)
from kindex_etl import flow_runs
from kindex_etl.config import settings
from kindex_etl.ingestion import IngestOptions

__all__ = ["ingest_flow", "plan", "run_ingest_flow", "warehouse_limit_name"]


@flow(name="kindex-ingest", log_prints=False, on_running=[flow_runs.remember])
async def ingest_flow(
    upstream: str | None = None,
    warehouse: str | None = None,
    backfill: bool = False,
    trigger: bool = True,
    prefix: str = "",
    regressions: bool = True,
    allow_empty: bool = False,
) -> dict[str, Any]:
    """Ingest new upstream CSV objects into the warehouse (scheduled hourly in deploy/).

    `upstream` / `warehouse` default to KINDEX_UPSTREAM / KINDEX_WAREHOUSE of the process that
    runs the flow. A backfill (re-read every object) never triggers GPU re-runs here; the
    `backfill` flow can, when asked. An ingest that committed runs is followed by the
    regressions flow (`regressions=False` skips it); one that committed nothing finishes the
    analysis an earlier run left owed (a stop after its commit), if any. No upstream CSV under
    `prefix` fails the run, unless `allow_empty`.

    Async for Prefect's engine alone: its synchronous engine joins the run's heartbeat thread,
    which sleeps in 1 s steps, at the end of every run (0 to 1 s of nothing a command;
    docs/performance.md, "Speed, stop 21"). The work is synchronous and runs on the flow's
    thread, as before.
    """
    started = time.perf_counter()
    cfg = settings()
    options = IngestOptions(backfill=backfill, trigger=trigger and not backfill, prefix=prefix)
    url = warehouse or cfg.warehouse
    summary = run_ingest(
        upstream or cfg.upstream, url, options, label="ingest", allow_empty=allow_empty
    ).as_dict()
    summary["ingest_s"] = summary["elapsed_s"]
    summary["analysis"] = None  # no commit (or regressions=False): no analysis ran
    if regressions and summary["commits"]:
        summary["analysis"] = analysis_subflow(url, after_seq=min(summary["commits"]) - 1)
    elif regressions:
        summary["analysis"] = owed_analysis_subflow(url)
    # The run's whole time, the analysis included (issue 32: "took 3.64 s" for 17 s).
    summary["elapsed_s"] = time.perf_counter() - started
    return summary


def run_ingest_flow(**parameters: Any) -> Any:
    """`ingest_flow(**parameters)` from synchronous code (the CLI, the demo, a thread).

    It runs its own event loop: from async code, `await ingest_flow(...)` instead.
    """
    return asyncio.run(ingest_flow(**parameters))
