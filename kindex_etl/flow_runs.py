"""The flow runs this process runs, so that a stop ends them in Prefect as `Cancelled`.

A command stopped by Ctrl-C or SIGTERM leaves with `os._exit` (`kindex_etl.cli.stops`): the
commit protocol makes that safe for the warehouse, and unwinding Prefect's engine took a
minute. But the engine then never reports an end, and Prefect showed every stopped ingest as
`Running` for good (issue 54). Each flow remembers its run when it starts (`remember`, an
`on_running` hook of every flow in `flows/`), and the stop marks those not finished
`Cancelled` through Prefect's API (`end_unfinished`), bounded in time, before it exits.

Prefect's own SIGTERM bridge may have marked a run `Crashed` first (it raises in the flow on a
SIGTERM); a stop asked for is not a crash, so that state is replaced too. A process killed
outright (SIGKILL, the OOM killer) cannot say anything: its runs stay `Running` until a
server-side zombie check marks them (docs/deploy.md).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

END_BUDGET_S = 2.0  # the longest a stop waits for Prefect's API to take the new states

_lock = threading.Lock()
_runs: list[tuple[Any, str | None]] = []  # (flow run id, the API URL it was created on)


def remember(flow: Any, flow_run: Any, state: Any) -> None:
    """An `on_running` hook: note the run (and its API) for `end_unfinished`."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    client = getattr(context, "client", None) if context is not None else None
    url = getattr(client, "api_url", None)
    with _lock:
        _runs.append((flow_run.id, str(url) if url is not None else None))


def remembered() -> list[Any]:
    with _lock:
        return [run_id for run_id, _ in _runs]


def end_unfinished(message: str, budget_s: float = END_BUDGET_S) -> int:
    """Mark every remembered run that has not ended `Cancelled`; returns how many were.

    Runs on a thread of its own within `budget_s`: a stop must not hang on a dead API. Subflows
    first (they started last), so a parent is never seen to end before its child.
    """
    with _lock:
        runs = list(reversed(_runs))
    if not runs:
        return 0
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(_end(runs, message)), daemon=True)
    worker.start()
    worker.join(budget_s)
    return done[0] if done else 0


def _end(runs: list[tuple[Any, str | None]], message: str) -> int:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelled

    # Ended on their own (or by an earlier stop): left as they are. Crashed is not among them.
    ended = {StateType.COMPLETED, StateType.FAILED, StateType.CANCELLED}
    count = 0
    for url in dict.fromkeys(u for _, u in runs):
        # A thread of its own sees no settings context: name the API the runs were made on
        # (with KINDEX_LOCAL_SERVER=0 it is in no environment variable).
        updates = {PREFECT_API_URL: url} if url else {}
        with temporary_settings(updates=updates), get_client(sync_client=True) as client:
            for run_id, _ in (r for r in runs if r[1] == url):
                # One run's trouble (gone, an API error) must not keep the others Running.
                with contextlib.suppress(Exception):
                    run = client.read_flow_run(run_id)
                    if run.state is None or run.state.type not in ended:
                        client.set_flow_run_state(run_id, Cancelled(message=message), force=True)
                        count += 1
    return count
