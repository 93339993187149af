"""The storage seam: one small object-store interface for local folders and S3.

Every stage talks to an `ObjectStore`; which one is picked by URL (`open_store`). Keys are
always relative, '/'-separated and validated: upstream object keys are data, and a key can
never name a path outside the store's root.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from kindex_etl.errors import UnsafeKey

_BAD_SEGMENTS = {"", ".", ".."}
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


def check_key(key: str) -> str:
    """Return `key` if it is a safe relative object key, else raise UnsafeKey (a ValueError)."""
    if not key or key.startswith("/") or _CONTROL.search(key):
        raise UnsafeKey(f"unsafe object key: {key!r}")
    if any(part in _BAD_SEGMENTS for part in key.split("/")):
        raise UnsafeKey(f"unsafe object key: {key!r}")
    return key


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str
    last_modified: datetime


@runtime_checkable
class ObjectStore(Protocol):
    """What the pipeline needs of a bucket or folder."""

    url: str

    def list(self, prefix: str = "", *, start_after: str = "") -> Iterator[ObjectInfo]:
        """Every object under `prefix`, any depth, in key order (only keys > `start_after`)."""
        ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def open_read(self, key: str) -> BinaryIO:
        """A streaming reader; callers close it. Raises NotFound."""
        ...

    def get_bytes(self, key: str) -> bytes: ...

    def read_tail(self, key: str, size: int) -> bytes:
        """The last `size` bytes of an object (all of it when smaller): a Parquet footer
        without the rest. Raises NotFound."""
        ...

    def put_bytes(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        """Write a small object atomically; returns its new ETag.

        `if_none_match=True` creates only if absent, `if_match=etag` replaces only that
        version; a lost condition raises PreconditionFailed.
        """
        ...

    def put_file(self, key: str, path: Path) -> str:
        """Upload a local file (streamed, in parts when large); returns its ETag."""
        ...

    def move_file(self, key: str, path: Path) -> str:
        """Like put_file, but the store takes the local file over (it is gone afterwards)."""
        ...

    def copy(self, src_key: str, dst_key: str) -> None:
        """Server-side copy (a rename is fine where the store can; src may then vanish)."""
        ...

    def delete(self, key: str) -> None:
        """Delete; a missing key is not an error."""
        ...

    def local_path(self, key: str) -> Path | None:
        """A filesystem path for the key where the store has one (lets readers mmap)."""
        ...
