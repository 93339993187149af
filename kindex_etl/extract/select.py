"""Which upstream objects a backfill selects: by key prefix, commit range, release tag, time.

All filters combine with AND; no filter at all selects every CSV:

- `prefix`: object keys that start with it.
- `from_commit` .. `to_commit`: the commit folders `benchmarks/<sha>` or `benchmarks/<sha>-<tag>`
  of the entries of `benchmarks/commits.txt` from one to the other, both included, in the file's
  order (either end may be left open). A commit is named by its short SHA, a longer or shorter
  form of it (unambiguous, 4+ characters), or the whole folder name. Only per-commit objects
  are selected then: the cumulative `benchmark/data/all_benchmark_data.csv` is not.
- `min_version` .. `max_version` (both included, PEP 440 order): commit folders whose tag is a
  version in that range (`<sha>-v0.8.0` -> 0.8.0). It selects OBJECTS, not rows: every row of a
  selected file is ingested whatever its own liger_version, untagged commit folders and the
  cumulative file are never selected, and no row of another object is picked out. (A row filter
  would have to leave the cumulative file half-ingested while recording it as done.)
- `since` .. `until`: the object's last-modified time in the store (S3 LastModified, a file's
  mtime), `since <= t < until`, ISO 8601; without a zone it is UTC, a bare date is its midnight.
  It is when the object was written to the store, not when it was benchmarked: use the commit
  range for upstream history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from packaging.version import Version

from kindex_etl.contracts.upstream import COMMITS_LIST, PER_COMMIT_PREFIX
from kindex_etl.contracts.versions import parse_version as _parse
from kindex_etl.errors import NotFound
from kindex_etl.extract.discover import read_commit_list
from kindex_etl.storage import ObjectInfo, ObjectStore

BENCHMARKS = PER_COMMIT_PREFIX
COMMITS_KEY = COMMITS_LIST


def _sha(folder: str) -> str:
    return folder.split("-", 1)[0]


def _tag(folder: str) -> str:
    return folder.split("-", 1)[1] if "-" in folder else ""


def _commit_folder(key: str) -> str | None:
    """`<sha>[-<tag>]` for keys under benchmarks/<folder>/, else None."""
    if not key.startswith(BENCHMARKS):
        return None
    parts = key[len(BENCHMARKS) :].split("/")
    return parts[0] if len(parts) >= 2 and parts[0] else None


def find_commit(entries: list[str], ref: str) -> int:
    """Index in commits.txt of the entry `ref` names; ValueError if none or several."""
    ref = ref.strip()
    if not ref:
        raise ValueError("empty commit reference")
    exact = [i for i, e in enumerate(entries) if e == ref]
    if len(exact) == 1:
        return exact[0]
    want = _sha(ref).lower()
    hits = [
        i
        for i, e in enumerate(entries)
        if len(want) >= 4 and (_sha(e).lower().startswith(want) or want.startswith(_sha(e).lower()))
    ]
    if not hits:
        raise ValueError(f"commit {ref!r} is not in {COMMITS_KEY}")
    if len(hits) > 1:
        found = ", ".join(entries[i] for i in hits[:5])
        raise ValueError(f"commit {ref!r} is ambiguous in {COMMITS_KEY}: {found}")
    return hits[0]


def commit_range(entries: list[str], from_commit: str | None, to_commit: str | None) -> list[str]:
    """The entries from `from_commit` to `to_commit`, both included, in the file's order."""
    start = find_commit(entries, from_commit) if from_commit else 0
    end = find_commit(entries, to_commit) if to_commit else len(entries) - 1
    if start > end:
        raise ValueError(
            f"{from_commit!r} comes after {to_commit!r} in {COMMITS_KEY}: nothing in between"
        )
    return entries[start : end + 1]


def parse_version(text: str | None, what: str) -> Version | None:
    if text is None or not str(text).strip():
        return None
    version = _parse(str(text).strip())
    if version is None:
        raise ValueError(f"{what}: not a version: {text!r}")
    return version


def parse_time(text: str | datetime | None, what: str) -> datetime | None:
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, datetime):
        value = text
    else:
        try:
            value = datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(f"{what}: not an ISO 8601 date or time: {text!r}") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class Selection:
    """What a backfill selects; `__call__` is the IngestOptions.include predicate."""

    prefix: str = ""
    commits: frozenset[str] | None = None  # short SHAs of the selected commit folders
    min_version: Version | None = None
    max_version: Version | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def per_commit_only(self) -> bool:
        return (
            self.commits is not None
            or self.min_version is not None
            or (self.max_version is not None)
        )

    @property
    def list_prefix(self) -> str:
        """Where to list: the user's prefix, or benchmarks/ when only commit folders qualify."""
        if self.prefix or not self.per_commit_only:
            return self.prefix
        return BENCHMARKS

    def __call__(self, info: ObjectInfo) -> bool:
        if not info.key.startswith(self.prefix):
            return False
        if self.per_commit_only:
            folder = _commit_folder(info.key)
            if folder is None:
                return False
            if self.commits is not None and _sha(folder).lower() not in self.commits:
                return False
            if self.min_version is not None or self.max_version is not None:
                version = _parse(_tag(folder))
                if version is None:
                    return False
                if self.min_version is not None and version < self.min_version:
                    return False
                if self.max_version is not None and version > self.max_version:
                    return False
        modified = info.last_modified
        if modified.tzinfo is None:
            modified = modified.replace(tzinfo=UTC)
        if self.since is not None and modified < self.since:
            return False
        return not (self.until is not None and modified >= self.until)

    def describe(self, commit_entries: list[str] | None = None) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "commits": commit_entries,
            "min_version": str(self.min_version) if self.min_version else None,
            "max_version": str(self.max_version) if self.max_version else None,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }


def commit_entries(store: ObjectStore) -> list[str] | None:
    """The entries of benchmarks/commits.txt, or None when the upstream has none."""
    try:
        return read_commit_list(store, COMMITS_KEY)
    except NotFound:
        return None


def select(
    store: ObjectStore,
    *,
    prefix: str = "",
    from_commit: str | None = None,
    to_commit: str | None = None,
    min_version: str | None = None,
    max_version: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
) -> tuple[Selection, list[str] | None]:
    """The selection the filters describe, and the commits.txt entries a range picked.

    Raises ValueError for a filter that cannot be met (unknown commit, bad version or time).
    """
    entries: list[str] | None = None
    commits: frozenset[str] | None = None
    if from_commit or to_commit:
        listed = commit_entries(store)
        if listed is None:
            raise ValueError(f"{COMMITS_KEY} not found in {store.url}: cannot select commits")
        entries = commit_range(listed, from_commit, to_commit)
        commits = frozenset(_sha(e).lower() for e in entries)
    selection = Selection(
        prefix=prefix,
        commits=commits,
        min_version=parse_version(min_version, "min_version"),
        max_version=parse_version(max_version, "max_version"),
        since=parse_time(since, "since"),
        until=parse_time(until, "until"),
    )
    return selection, entries
