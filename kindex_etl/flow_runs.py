"""The flow runs this process runs, so that a stop ends them in Prefect as `Cancelled`.

A command stopped by Ctrl-C or SIGTERM leaves with `os._exit` (`kindex_etl.cli.stops`): the
commit protocol makes that safe for the warehouse, and unwinding Prefect's engine took a
minute. But the engine then never reports an end, and Prefect showed every stopped ingest as
`Running` for good (issue 54). Each flow remembers its run when it starts (`remember`, an
`on_running` hook of every flow in `flows/`), and the stop marks those not finished
`Cancelled` through Prefect's API (`end_unfinished`), bounded in time, before it exits.

Prefect's own SIGTERM bridge may have marked a run `Crashed` first (it raises in the flow on a
SIGTERM); a stop asked for is not a crash, so that state is replaced too.

A process killed outright (SIGKILL, the OOM killer) cannot say anything. A command keeps a
ledger of its runs under `KINDEX_STATE_DIR/flow-runs/<pid>.json` (`keep_ledger`), removed when
it ends or stops; the next command that starts Prefect marks the runs of a ledger whose process
is gone `Crashed` (`crash_orphans`), as Prefect would have had its engine seen the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

END_BUDGET_S = 2.0  # the longest a stop waits for Prefect's API to take the new states

_lock = threading.Lock()
_runs: list[tuple[Any, str | None]] = []  # (flow run id, the API URL it was created on)
_ledger: Path | None = None


def remember(flow: Any, flow_run: Any, state: Any) -> None:
    """An `on_running` hook: note the run (and its API) for `end_unfinished`."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    client = getattr(context, "client", None) if context is not None else None
    url = getattr(client, "api_url", None)
    with _lock:
        _runs.append((flow_run.id, str(url) if url is not None else None))
        _write_ledger()


def _started(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot, Linux), to tell it from a later process
    given the same pid; None where /proc cannot say."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def keep_ledger(folder: Path) -> None:
    """Note this process's runs in `folder/<pid>.json` from now on (a CLI command's)."""
    global _ledger
    folder.mkdir(parents=True, exist_ok=True)
    with _lock:
        _ledger = folder / f"{os.getpid()}.json"
        if _runs:
            _write_ledger()


def _write_ledger() -> None:
    if _ledger is None:
        return
    data = {
        "pid": os.getpid(),
        "started": _started(os.getpid()),
        "runs": [[str(run_id), url] for run_id, url in _runs],
    }
    part = _ledger.with_suffix(".part")
    part.write_text(json.dumps(data))
    part.replace(_ledger)  # whole or absent: a kill mid-write leaves the previous ledger


def forget_ledger() -> None:
    """The command ended (or its stop ended its runs): nothing is left to mark."""
    if _ledger is not None:
        _ledger.unlink(missing_ok=True)


def _gone(data: dict[str, Any]) -> bool:
    pid = int(data.get("pid") or 0)
    if pid <= 0 or pid == os.getpid():
        return pid <= 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return data.get("started") is not None and _started(pid) != data.get("started")


def crash_orphans(folder: Path, budget_s: float = END_BUDGET_S) -> int:
    """Mark `Crashed` the unfinished runs of every ledger in `folder` whose process is gone
    (killed: it could not say); returns how many. Bounded by `budget_s`, like a stop."""
    orphans: list[tuple[Path, list[Any]]] = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and _gone(data):
            orphans.append((path, [run_id for run_id, _ in data.get("runs", [])]))
    if not orphans:
        return 0
    done: list[int] = []

    def work() -> None:
        count = _set_unfinished(
            [run_id for _, ids in orphans for run_id in ids], crashed=True, message=(
                "the kindex-etl process running this flow was killed (no stop was asked "
                "for, so it could not report); what was committed stays"
            ),
        )  # fmt: skip
        for path, _ in orphans:
            path.unlink(missing_ok=True)
        done.append(count)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(budget_s)
    return done[0] if done else 0


def _set_unfinished(run_ids: list[Any], *, crashed: bool, message: str) -> int:
    """With this process's Prefect settings (its API): each run not ended gets the state."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import State, StateType
    from prefect.states import Cancelled, Crashed

    ended = {StateType.COMPLETED, StateType.FAILED, StateType.CANCELLED, StateType.CRASHED}
    count = 0
    with get_client(sync_client=True) as client:
        for run_id in run_ids:
            with contextlib.suppress(Exception):  # gone, another API: the others still count
                run = client.read_flow_run(run_id)
                if run.state is None or run.state.type not in ended:
                    new: State[Any] = (
                        Crashed(message=message) if crashed else Cancelled(message=message)
                    )
                    client.set_flow_run_state(run_id, new, force=True)
                    count += 1
    return count


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
