"""The backfill flow: re-ingest a chosen set of upstream objects, on demand.

Which objects (all filters combine with AND; no filter at all selects every CSV):

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

A backfill re-reads selected objects even when the warehouse has their current version (rows
already there count as duplicates; nothing is written twice). It never triggers GPU re-runs
unless `trigger=True`. `dry_run=True` lists the objects (key, ETag, size) and changes nothing:
no warehouse folder is created, nothing is recovered, staged or committed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from packaging.version import InvalidVersion, Version
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from flows.ingest import IO_RETRY_DELAYS, normalize_warehouse_url, run_ingest, transient
from kindex_etl.config import settings
from kindex_etl.extract.discover import COMMITS_LIST, read_commit_list
from kindex_etl.pipeline import IngestOptions, IngestRun
from kindex_etl.storage import NotFound, ObjectInfo, open_store
from kindex_etl.summary import IngestSummary

BENCHMARKS = "benchmarks/"
COMMITS_KEY = BENCHMARKS + COMMITS_LIST
PROGRESS_KEY = "kindex-backfill-progress"
DEFAULT_OBJECTS_PER_BATCH = 32


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
    try:
        return Version(str(text).strip())
    except InvalidVersion:
        raise ValueError(f"{what}: not a version: {text!r}") from None


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
                try:
                    version = Version(_tag(folder))
                except InvalidVersion:
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


@task(
    name="read-commit-list", retries=3, retry_delay_seconds=IO_RETRY_DELAYS,
    retry_condition_fn=transient, cache_policy=NONE,
)  # fmt: skip
def read_commits(upstream: str) -> list[str] | None:
    """The entries of benchmarks/commits.txt, or None when the upstream has none."""
    try:
        return read_commit_list(open_store(upstream), COMMITS_KEY)
    except NotFound:
        return None


def _progress() -> tuple[Callable[[list[list[str]]], None], Callable[[int, list[str]], None]]:
    """Callbacks that keep one progress artifact per commit batch."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    state: dict[str, Any] = {"id": None, "done": 0, "objects": 0, "batches": 0}

    def on_planned(chunks: list[list[str]]) -> None:
        n = sum(map(len, chunks))
        state["id"] = create_progress_artifact(
            progress=0.0 if chunks else 100.0,
            key=PROGRESS_KEY,
            description=f"backfill: 0/{n} objects, 0/{len(chunks)} commit batches",
        )
        state["objects"], state["batches"] = n, len(chunks)

    def on_batch(i: int, keys: list[str]) -> None:
        state["done"] += len(keys)
        artifact_id: UUID = state["id"]
        update_progress_artifact(
            artifact_id,
            progress=round(100.0 * state["done"] / max(1, state["objects"]), 1),
            description=(
                f"backfill: {state['done']}/{state['objects']} objects, "
                f"{i}/{state['batches']} commit batches"
            ),
        )

    return on_planned, on_batch


@flow(name="kindex-backfill", log_prints=False)
def backfill_flow(
    upstream: str | None = None,
    warehouse: str | None = None,
    prefix: str = "",
    from_commit: str | None = None,
    to_commit: str | None = None,
    min_version: str | None = None,
    max_version: str | None = None,
    since: str | None = None,
    until: str | None = None,
    dry_run: bool = False,
    trigger: bool = False,
    objects_per_batch: int = DEFAULT_OBJECTS_PER_BATCH,
) -> dict[str, Any]:
    """Re-ingest the selected upstream objects (see the module docstring for the filters).

    Returns the summary with `objects` (key, etag, size, status, counts) and `selection`.
    """
    logger = get_run_logger()
    cfg = settings()
    upstream = upstream or cfg.upstream
    warehouse = warehouse or cfg.warehouse

    entries: list[str] | None = None
    commits: frozenset[str] | None = None
    if from_commit or to_commit:
        listed = read_commits(upstream)
        if listed is None:
            raise ValueError(f"{COMMITS_KEY} not found in {upstream}: cannot select commits")
        entries = commit_range(listed, from_commit, to_commit)
        commits = frozenset(_sha(e).lower() for e in entries)
        logger.info("commits %s .. %s: %d folder(s)", entries[0], entries[-1], len(entries))
    selection = Selection(
        prefix=prefix,
        commits=commits,
        min_version=parse_version(min_version, "min_version"),
        max_version=parse_version(max_version, "max_version"),
        since=parse_time(since, "since"),
        until=parse_time(until, "until"),
    )
    options = IngestOptions(
        backfill=True,
        trigger=trigger,
        prefix=selection.list_prefix,
        include=selection,
        dry_run=dry_run,
        max_objects_per_commit=max(1, objects_per_batch),
    )
    summary = _run(upstream, warehouse, options)
    out = summary.as_dict(objects=True)
    out["selection"] = selection.describe(entries)
    out["dry_run"] = dry_run
    return out


def _run(upstream: str, warehouse: str, options: IngestOptions) -> IngestSummary:
    if options.dry_run:
        return _dry_run(upstream, warehouse, options)
    on_planned, on_batch = _progress()
    return run_ingest(
        IngestRun(upstream, warehouse, options),
        label="backfill",
        on_planned=on_planned,
        on_batch=on_batch,
    )


def _dry_run(upstream: str, warehouse: str, options: IngestOptions) -> IngestSummary:
    """Plan against the warehouse as it is, without creating or changing it."""
    target = normalize_warehouse_url(warehouse)
    missing_local = not target.startswith("s3://") and not _is_dir(target)
    with tempfile.TemporaryDirectory(prefix="kindex-dry-run-") as empty:
        # A warehouse that does not exist yet is an empty one: plan against an empty stand-in
        # rather than create the folder.
        run = IngestRun(upstream, empty if missing_local else warehouse, options)
        run.summary.warehouse = target

        def mark_known(chunks: list[list[str]]) -> None:
            done = run.warehouse.done_objects()
            for report in run.summary.objects:
                if done.get(report.key) == report.etag:
                    report.detail = (
                        "already in the warehouse at this ETag: rows would be duplicates"
                    )

        return run_ingest(run, label="backfill", on_planned=mark_known)


def _is_dir(path: str) -> bool:
    from pathlib import Path

    return Path(path).is_dir()
