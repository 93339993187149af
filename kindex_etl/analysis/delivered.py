"""Which announcements Prefect's server stored: the announcement mark moves only past those.

`emit_event` hands an event to Prefect's events worker, which sends it in the background. A
send that still fails after the client's reconnects is logged and dropped, and a full queue
drops events too; `EventsWorker.wait_until_empty` returns all the same. So an empty queue says
nothing about delivery. The server, asked which of the ids it has stored, does: that is the
only end-to-end answer, and the same query a consumer of the events would make
(`POST /events/filter`).

The same question comes before sending: an id the server stored already (an earlier attempt
whose confirmation ran out of time) is not sent again. The server would drop the duplicate,
but its automations remember the ids they acted on for a while only (in memory, bounded), so a
late resend could trigger them twice.

The server's event persister writes in batches, at most
`PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL` apart (5 s by default), so an event
sent a moment ago may not be stored yet: the caller polls, backing off, up to a deadline
(`KINDEX_ANNOUNCE_CONFIRM_S`; 0 turns the check off, for a server that stores no events).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

# The most events one page of /events/filter holds (the server's interactive page size).
PAGE = 50
FIRST_POLL_S, MAX_POLL_S = 0.5, 5.0


@contextmanager
def _client() -> Iterator[SyncPrefectClient]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        yield client


def window_start(events: Sequence[Mapping[str, Any]], now: datetime) -> datetime:
    """Where to look for `events` in the server's store: before the earliest `occurred`, and
    before `now`, taken before any is sent (the events worker stamps the ones without)."""
    return min([now, *(e["occurred"] for e in events if e.get("occurred"))]) - timedelta(minutes=1)


def stored(client: SyncPrefectClient, ids: Sequence[UUID], since: datetime) -> set[UUID]:
    """Those of `ids` that the Prefect server stored (occurred at `since` or later)."""
    found: set[UUID] = set()
    # `until` defaults to the server's now: an event stamped by a writer whose clock runs
    # ahead of the server's would never be found.
    until = (datetime.now(UTC) + timedelta(days=1)).isoformat()
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


def not_stored(events: Sequence[Mapping[str, Any]], since: datetime) -> list[Mapping[str, Any]]:
    """The events (`emit_event` keyword arguments with an `id`) the server has not stored."""
    if not events:
        return []
    with _client() as client:
        have = stored(client, [e["id"] for e in events], since)
    return [e for e in events if e["id"] not in have]


def unconfirmed(
    events: Sequence[Mapping[str, Any]], wait_s: float, since: datetime
) -> list[Mapping[str, Any]]:
    """The events the server has not stored after up to `wait_s` seconds; [] when every one
    is stored. One client for the whole wait, polls backing off from 0.5 s to 5 s (a hosted
    server rate-limits its API)."""
    missing = {e["id"]: e for e in events}
    if not missing:
        return []
    deadline = time.monotonic() + wait_s
    pause = FIRST_POLL_S
    with _client() as client:
        while True:
            for found in stored(client, list(missing), since):
                missing.pop(found, None)
            left = deadline - time.monotonic()
            if not missing or left <= 0:
                return list(missing.values())
            time.sleep(min(pause, left))
            pause = min(pause * 2, MAX_POLL_S)
