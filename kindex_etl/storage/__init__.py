"""Object stores picked by URL: a local directory (default) or `s3://bucket[/prefix]`."""

from __future__ import annotations

from urllib.parse import urlparse

from .base import (
    NotFound,
    ObjectInfo,
    ObjectStore,
    PreconditionFailed,
    StorageError,
    check_key,
)
from .local import LocalStore

__all__ = [
    "LocalStore",
    "NotFound",
    "ObjectInfo",
    "ObjectStore",
    "PreconditionFailed",
    "StorageError",
    "check_key",
    "open_store",
]


def open_store(url: str, *, create: bool = False) -> ObjectStore:
    """Open the store a URL names. `create` makes a missing local directory (warehouses)."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        from .s3 import S3Store

        return S3Store.from_url(url)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else url
        return LocalStore(path, create=create)
    raise StorageError(f"unsupported URL scheme {parsed.scheme!r}: use a directory or s3://")
