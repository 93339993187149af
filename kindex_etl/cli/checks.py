"""Errors first: everything that can be checked before Prefect starts, each as one clear line.

URLs and folders (`open_store`), S3 credentials and that the bucket answers (`S3Store.probe`,
bounded by botocore's own timeouts and retries), backfill filters (commits that exist in
`benchmarks/commits.txt`, versions and times that parse): a mistake costs a second, not a
Prefect start and a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kindex_etl.errors import KindexError, StorageError
from kindex_etl.storage import ObjectStore, open_store

if TYPE_CHECKING:
    from kindex_etl.extract.select import Selection


class CheckFailed(KindexError):
    """A check before the work starts failed: nothing was done (exit 2)."""


class UsageError(CheckFailed):
    """The command line asks for something that cannot be done (exit 2)."""


def store(url: str, *, what: str, create: bool = False) -> ObjectStore:
    """Open `url` and, for S3, prove the credentials and the bucket; raise one clear error."""
    if not url:
        raise UsageError(f"no {what} given (--{what} or KINDEX_{what.upper()})")
    try:
        opened = open_store(url, create=create)
        probe = getattr(opened, "probe", None)
        if probe is not None:
            probe()
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None
    except (StorageError, OSError) as exc:
        raise CheckFailed(f"{what}: {exc}") from None
    return opened


def existing_store(url: str, *, what: str) -> ObjectStore:
    """Like `store`, for reading: a folder that does not exist is an error, never created."""
    return store(url, what=what, create=False)


def warehouse(url: str) -> ObjectStore:
    """The store of an existing warehouse: every command but `ingest` (and `backfill`, an
    ingest) refuses a URL that holds none, creating nothing (issue 32: a mistyped prefix made
    `compact` write a snapshot there, and a scheduled job succeeded on the wrong target)."""
    from kindex_etl.cli import stops
    from kindex_etl.load.warehouse import Warehouse

    opened = existing_store(url, what="warehouse")
    try:
        warehouse = Warehouse(opened)
        warehouse.refresh()
    except (StorageError, OSError) as exc:
        raise CheckFailed(f"warehouse: {exc}") from None
    if warehouse.head == 0:
        raise CheckFailed(
            f"warehouse: no warehouse at {url} (nothing was ever committed there; "
            "`kindex-etl ingest` makes one)"
        )
    stops.watch(url, warehouse.head)  # a stop then tells what was committed since
    return opened


def upstream_objects(url: str, prefix: str) -> None:
    """An upstream CSV lies under `prefix`, else one line and exit 2, before anything is
    created (`kindex_etl.ingestion.require_objects`; `--allow-empty` skips this)."""
    from kindex_etl.errors import EmptyUpstream
    from kindex_etl.ingestion.run import require_objects

    try:
        require_objects(url, prefix)
    except EmptyUpstream as exc:
        raise CheckFailed(str(exc)) from None
    except (StorageError, OSError) as exc:
        raise CheckFailed(f"upstream: {exc}") from None


def backfill_filters(
    upstream: ObjectStore, filters: dict[str, Any]
) -> tuple[Selection, list[str] | None]:
    """The selection and its commits.txt entries; UsageError if a filter cannot be met
    (unknown commit, bad version or time)."""
    from kindex_etl.extract.select import select

    try:
        return select(upstream, **filters)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
