"""Faults between boto3 and moto's server, injected through botocore's own event hooks.

A `before-send` handler sees every signed request of the store's client just before it goes
on the wire. It can answer in the server's place (500 InternalError, 503 SlowDown), raise
the error a reset socket gives (the request never arrived), sleep (a slow reply), or send the
request itself and then raise a read timeout: the request took effect but its reply was lost.
botocore's standard retry mode then does what it does in production.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError
from botocore.httpsession import URLLib3Session

KINDS = ("500", "503", "reset", "lost", "delay")
OPERATIONS = ("GET", "PUT", "HEAD", "LIST", "DELETE")

_BODIES = {
    "500": b"<Error><Code>InternalError</Code><Message>injected</Message></Error>",
    "503": b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>",
}


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterable[bytes]:
        yield self._body


def operation(request: Any) -> str:
    if request.method == "GET":
        return "LIST" if "list-type=" in request.url else "GET"
    return "PUT" if request.method == "POST" else str(request.method)


@dataclass
class Faults:
    """Inject `kinds` into `operations` at `rate`, reproducibly from `seed`."""

    rate: float
    kinds: tuple[str, ...] = KINDS
    operations: tuple[str, ...] = OPERATIONS
    seed: int = 0
    delay_s: float = 0.02
    match: str = ""  # only requests whose URL holds this
    limit: int | None = None  # at most this many faults
    injected: Counter[str] = field(default_factory=Counter)
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _http: URLLib3Session = field(default_factory=URLLib3Session)
    enabled: bool = True

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def _draw(self, op: str) -> str | None:
        with self._lock:
            if not self.enabled or op not in self.operations:
                return None
            if self.limit is not None and sum(self.injected.values()) >= self.limit:
                return None
            if self._rng.random() >= self.rate:
                return None
            kind = self._rng.choice(self.kinds)
            self.injected[f"{op} {kind}"] += 1
            return kind

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        if self.match and self.match not in request.url:
            return None
        kind = self._draw(operation(request))
        if kind is None:
            return None
        if kind in _BODIES:
            headers = {"Content-Type": "application/xml"}
            return AWSResponse(request.url, int(kind), headers, _Raw(_BODIES[kind]))
        if kind == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        if kind == "delay":
            time.sleep(self.delay_s)
            return None
        # "lost": the server acts on the request, the client never hears back.
        self._http.send(request).content
        raise ReadTimeoutError(endpoint_url=request.url)
