"""Which upstream objects are candidates, and which of them are new."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kindex_etl.extract.origin import identity_of, source_rank
from kindex_etl.storage import NotFound, ObjectInfo, ObjectStore, UnsafeKey

ENVIRONMENT_SIDECAR = "environment.json"


@dataclass(frozen=True)
class Candidate:
    info: ObjectInfo
    software: str  # canonical JSON of host facts from a sidecar environment.json, else ""

    @property
    def key(self) -> str:
        return self.info.key


def _folder(key: str) -> str:
    return key.rsplit("/", 1)[0] + "/" if "/" in key else ""


def any_csv(store: ObjectStore, prefix: str = "") -> bool:
    """Whether `discover` could find anything under `prefix`: stops at the first `*.csv`, so a
    large upstream costs one listing page, an empty one a single request."""
    return any(o.key.lower().endswith(".csv") for o in store.list(prefix))


def discover(
    store: ObjectStore,
    *,
    prefix: str = "",
    include: Callable[[ObjectInfo], bool] | None = None,
) -> list[Candidate]:
    """Every `*.csv` under `prefix`, at any depth: per-commit files first (oldest commit first),
    the cumulative file last (`origin.source_rank`): of copies of one measurement, dedup keeps
    the first, which must be the one from the commit that measured it.

    A CSV whose folder holds an `environment.json` (what our GPU re-runs upload) gets those
    host facts as its environment's software; upstream folders have none.
    """
    from kindex_etl.contracts.digests import canonical_json

    objects = list(store.list(prefix))
    sidecars = {_folder(o.key) for o in objects if o.key.rsplit("/", 1)[-1] == ENVIRONMENT_SIDECAR}
    out: list[Candidate] = []
    for info in objects:
        if not info.key.lower().endswith(".csv"):
            continue
        if include is not None and not include(info):
            continue
        software = ""
        folder = _folder(info.key)
        if folder in sidecars:
            try:
                facts = json.loads(store.get_bytes(folder + ENVIRONMENT_SIDECAR))
            except (NotFound, UnsafeKey, ValueError, RecursionError):
                # A sidecar that is not readable JSON records nothing; the CSV still counts.
                facts = None
            if isinstance(facts, dict):
                software_facts = facts.get("software", facts)
                if isinstance(software_facts, dict):
                    software = canonical_json(
                        {str(k): str(v) for k, v in software_facts.items() if v is not None}
                    ).decode()
        out.append(Candidate(info=info, software=software))
    out.sort(key=_ingest_order)
    return out


def _ingest_order(c: Candidate) -> tuple[int, float, str]:
    """Per-commit files in history order (oldest commit first; those the history catalog does
    not know after them), then the rest, the cumulative file last; key order within."""
    from kindex_etl.extract.history import default_history

    position = default_history().position(identity_of(c.key).commit_sha)
    return (source_rank(c.key), math.inf if position is None else position, c.key)


def pending(candidates: Iterable[Candidate], done: Mapping[str, str]) -> list[Candidate]:
    """Candidates whose current version (ETag) has not been ingested yet."""
    return [c for c in candidates if done.get(c.key) != c.info.etag]


def read_commit_list(store: ObjectStore, key: str) -> list[str]:
    """Short SHAs in publication order from a `benchmarks/commits.txt`."""
    text = store.get_bytes(key).decode("utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
