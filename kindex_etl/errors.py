"""Every exception the package raises on purpose, in one place.

Dependency-free, so that every stage (and the GPU host, which has only torch) can import it.
Messages never carry credentials: they name buckets, keys and error codes, not requests.
"""

from __future__ import annotations


class KindexError(Exception):
    """Base of the package's own errors; the CLI prints these as one `error:` line."""


class StorageError(KindexError):
    """A store could not be reached or used; the message never carries credentials."""


class PreconditionFailed(StorageError):
    """A conditional write lost: the object exists (create) or changed (update)."""


class NotFound(StorageError):
    """The object does not exist."""


class EmptyUpstream(KindexError, ValueError):
    """An ingest found no upstream CSV under its URL and prefix: most often a typo, so an error
    (a ValueError: a flow never retries it) unless the caller allows an empty upstream."""


class CatalogError(KindexError, ValueError):
    """A catalog (or the override directory naming one) cannot be used."""


class UnsafeKey(KindexError, ValueError):
    """An object key that could name a path outside its store (`..`, `/x`, `a//b`, control
    characters, backslashes, a symlink leaving the folder). Keys are data: this rejects one
    object, never the run."""


class BadFile(KindexError):
    """A whole upstream object cannot be read as an upstream CSV; `reason` is a stable code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Rejected(KindexError):
    """A row (descriptor key) cannot become a run; `reason` is a stable code, `detail` says why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def bare(self) -> Rejected:
        """The same rejection with no traceback or context, for caches.

        A cached exception that keeps its traceback pins every frame it passed through (their
        locals: the whole batch being normalized), and re-raising it adds the re-raiser's frames:
        caches of rejected keys held every batch that met one on data with many of them.
        """
        return Rejected(self.reason, self.detail)


class HarnessError(KindexError):
    """The liger-kernel harness could not be fetched, verified, unpacked or installed."""


class NoGPUError(KindexError, RuntimeError):
    """This machine cannot run the benchmarks: torch is missing or sees no GPU."""
