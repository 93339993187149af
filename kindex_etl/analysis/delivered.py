"""Which announcements Prefect's server stored: the announcement mark moves only past those.

`emit_event` hands an event to Prefect's events worker, which sends it in the background. A
send that still fails after the client's reconnects is logged and dropped, and a full queue
drops events too; `EventsWorker.wait_until_empty` returns all the same. So an empty queue says
nothing about delivery. The server, asked which of the ids it has stored, does: that is the
only end-to-end answer, and the same query a consumer of the events would make
(`POST /events/filter`).

The server's event persister writes in batches, at most
`PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL` apart (5 s by default), so an event
sent a moment ago may not be stored yet: the caller polls up to a deadline
(`KINDEX_ANNOUNCE_CONFIRM_S`; 0 turns the check off, for a server that stores no events).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

# The most events one page of /events/filter holds (the server's interactive page size).
PAGE = 50
POLL_S = 0.5


def stored(ids: Sequence[UUID], since: datetime) -> set[UUID]:
    """Those of `ids` that the Prefect server the process talks to has stored."""
    from prefect.client.orchestration import get_client

    found: set[UUID] = set()
    # `until` defaults to the server's now: an event stamped by a writer whose clock runs
    # ahead of the server's would never be found.
    until = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    with get_client(sync_client=True) as client:
        for start in range(0, len(ids), PAGE):
            chunk = [str(i) for i in ids[start : start + PAGE]]
            body = {
                "filter": {
                    "id": {"id": chunk},
                    "occurred": {"since": since.isoformat(), "until": until},
                },
                "limit": PAGE,
            }
            response = client.request("POST", "/events/filter", json=body)
            response.raise_for_status()
            found |= {UUID(e["id"]) for e in response.json()["events"]}
    return found


def unconfirmed(events: Sequence[Mapping[str, Any]], wait_s: float) -> list[Mapping[str, Any]]:
    """The events (`emit_event` keyword arguments, with `id` and `occurred`) that the server
    has not stored after up to `wait_s` seconds; [] when every one is stored."""
    missing = {e["id"]: e for e in events}
    if not missing:
        return []
    now = datetime.now(UTC)
    since = min(e.get("occurred") or now for e in events) - timedelta(minutes=1)
    deadline = time.monotonic() + wait_s
    while True:
        for found in stored(list(missing), since):
            missing.pop(found, None)
        if not missing or time.monotonic() >= deadline:
            return list(missing.values())
        time.sleep(POLL_S)
