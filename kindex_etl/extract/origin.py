"""Where a run came from, read off its object's key: origin, upstream commit, release tag.

The key is data, never a path to follow: a commit is taken from it only when it has the exact
shape upstream publishes (`benchmarks/<hex sha>[-<tag>]/<file>.csv`), and the sha is lower-cased
and checked to be 7 to 40 hex digits.

- `ci`: a per-commit file, what upstream's benchmark job measured at that commit;
- `contributed`: a row of the cumulative `all_benchmark_data.csv` (contributors add rows from
  their own machines and pre-merge code: no commit is known);
- `rerun`: our own GPU re-runs (`reruns/<version>/<run-id>/`, or any folder whose CSV has an
  `environment.json` beside it): the commit is the release tag's, which the history catalog
  resolves.
Anything else has no origin (null): the analysis keeps it in a series of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CI, CONTRIBUTED, RERUN = "ci", "contributed", "rerun"
ORIGINS = (CI, CONTRIBUTED, RERUN)
CUMULATIVE_NAME = "all_benchmark_data.csv"
_PER_COMMIT = re.compile(
    r"(?:^|/)benchmarks/(?P<sha>[0-9a-fA-F]{7,40})(?:-(?P<tag>[A-Za-z0-9][A-Za-z0-9._+-]{0,63}))?"
    r"/[^/]+\.csv$"
)
_RERUN = re.compile(r"(?:^|/)reruns/(?P<version>[A-Za-z0-9][A-Za-z0-9._+-]{0,63})/[^/]+/")


@dataclass(frozen=True)
class SourceIdentity:
    origin: str | None
    commit_sha: str | None  # lower-case hex as the key spells it (usually 7 digits)
    tag: str | None  # release tag in the folder name (`v0.8.0`), or a re-run's version's tag


def identity_of(key: str, *, software: str = "") -> SourceIdentity:
    """`software`: the host facts discover read from an `environment.json` beside the CSV."""
    found = _PER_COMMIT.search(key)
    if found is not None:
        return SourceIdentity(CI, found["sha"].lower(), found["tag"])
    rerun = _RERUN.search(key)
    if rerun is not None:
        version = rerun["version"]
        return SourceIdentity(RERUN, None, version if version.startswith("v") else f"v{version}")
    if key.rsplit("/", 1)[-1] == CUMULATIVE_NAME:
        return SourceIdentity(CONTRIBUTED, None, None)
    if software:
        return SourceIdentity(RERUN, None, None)
    return SourceIdentity(None, None, None)


def source_rank(key: str) -> int:
    """Ingest order of an object: per-commit files first, then re-runs and others, the
    cumulative file last. The cumulative file repeats the per-commit files' rows; dedup keeps
    the first copy, and that copy must be the one that knows its commit (origin `ci`)."""
    if _PER_COMMIT.search(key):
        return 0
    if key.rsplit("/", 1)[-1] == CUMULATIVE_NAME:
        return 2
    return 1
