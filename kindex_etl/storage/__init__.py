"""Object stores picked by URL: a local directory (default) or `s3://bucket[/prefix]`."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from kindex_etl.errors import NotFound, PreconditionFailed, StorageError, UnsafeKey
from kindex_etl.storage.base import ObjectInfo, ObjectStore, check_key
from kindex_etl.storage.local import LocalStore

__all__ = [
    "LocalStore",
    "NotFound",
    "ObjectInfo",
    "ObjectStore",
    "PreconditionFailed",
    "StorageError",
    "UnsafeKey",
    "check_key",
    "open_store",
    "store_url",
]


def store_url(url: str) -> str:
    """The URL a store opened from `url` reports (`ObjectStore.url`), without opening it."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        prefix = parsed.path.strip("/")
        return f"s3://{parsed.netloc}/{prefix}" if prefix else f"s3://{parsed.netloc}"
    path = parsed.path if parsed.scheme == "file" else url
    return str(Path(path).resolve())


def open_store(url: str, *, create: bool = False) -> ObjectStore:
    """Open the store a URL names. `create` makes a missing local directory (warehouses)."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        from kindex_etl.storage.s3 import S3Store

        return S3Store.from_url(url)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else url
        return LocalStore(path, create=create)
    raise StorageError(f"unsupported URL scheme {parsed.scheme!r}: use a directory or s3://")
