"""Upstream's commit history and harness revisions, as the catalog ships them.

`history.json` and `harness.json` are generated from a Liger-Kernel git checkout by
`scripts/catalog_history.py` (`kindex_etl.catalog.upstream_git`, whose docstring states the
harness rule); never edit them by hand. This module only reads them:

- `History`: main's first-parent commits in order (`position(sha)`, `first_release(sha)`,
  `version_span(version)`), shas matched in full or by a prefix of at least 7 characters, as the
  gh-pages folders `benchmarks/<sha>[-<tag>]/` name them.
- `Harness`: per kernel name as upstream writes it in the CSVs, the positions at which what its
  benchmark times changed (`revisions(kernel)`, `between(kernel, before, after)`,
  `revision_at(kernel, position)`). Each takes an optional `provider` (`"liger"`, `"torch"`,
  ... as the CSVs spell it): given, only the revisions that changed that provider's timed code
  count (a revision that added another provider, or changed the reference only `torch` times,
  leaves liger's series whole); omitted, every revision counts, as before.

The module-level `position`, `first_release` and `harness_revisions` read the packaged files.
"""

from __future__ import annotations

import bisect
import fnmatch
import json
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

MIN_PREFIX = 7


@dataclass(frozen=True)
class HistoryCommit:
    sha: str
    short: str
    position: int
    date: datetime
    release: str | None  # the first release tag that contains it; None: not released yet


@dataclass(frozen=True)
class Release:
    tag: str
    sha: str
    position: int | None  # None: the tagged commit is not on main's first-parent line


@dataclass(frozen=True)
class HarnessRevision:
    position: int
    sha: str
    kernel_names: tuple[str, ...]
    changed: tuple[str, ...]  # "created", "script", or "path:definition"
    removed: bool = False
    # The providers whose timed code it changed; None: every provider (shared code changed,
    # the script was created, or it could not be split).
    providers: tuple[str, ...] | None = None


def _tag_key(tag: str) -> str:
    return tag if tag.startswith("v") else f"v{tag}"


class History:
    def __init__(self, doc: dict[str, Any]) -> None:
        source = doc["source"]
        self.repository: str = source["repository"]
        self.head: str = source["head"]
        self.commits = tuple(
            HistoryCommit(
                sha=c["sha"],
                short=c["short"],
                position=c["position"],
                date=datetime.fromisoformat(c["date"]),
                release=c["release"],
            )
            for c in doc["commits"]
        )
        self.releases = tuple(Release(r["tag"], r["sha"], r["position"]) for r in doc["releases"])
        self._by_prefix: dict[str, list[HistoryCommit]] = {}
        for commit in self.commits:
            self._by_prefix.setdefault(commit.sha[:MIN_PREFIX], []).append(commit)
        self._tags = {r.tag: r for r in self.releases}

    def commit(self, sha: str) -> HistoryCommit | None:
        """The first-parent commit named by `sha` (full, or a unique prefix of 7+ characters)."""
        sha = sha.strip().lower()
        if len(sha) < MIN_PREFIX:
            return None
        found = [c for c in self._by_prefix.get(sha[:MIN_PREFIX], ()) if c.sha.startswith(sha)]
        return found[0] if len(found) == 1 else None

    def position(self, sha: str) -> int | None:
        commit = self.commit(sha)
        return None if commit is None else commit.position

    def first_release(self, sha: str) -> str | None:
        commit = self.commit(sha)
        return None if commit is None else commit.release

    def at(self, position: int) -> HistoryCommit:
        return self.commits[position]

    def release(self, tag: str) -> Release | None:
        """A release by tag, with or without its `v` (`0.6.4`, `v0.6.4`)."""
        return self._tags.get(_tag_key(tag))

    def version_span(self, version: str) -> tuple[int, int] | None:
        """First and last positions whose package reports `version`.

        Upstream bumps the version at the release, so commits on main from a release's tag up
        to the next release's tag (exclusive) still report that release's number. None when
        the tag is not on main's first-parent line.
        """
        release = self.release(version)
        if release is None or release.position is None:
            return None
        later = [
            r.position
            for r in self.releases
            if r.position is not None and r.position > release.position
        ]
        return release.position, (min(later) - 1 if later else len(self.commits) - 1)


class Harness:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.head: str | None = doc["source"]["head"]
        self.scripts: dict[str, tuple[HarnessRevision, ...]] = {
            script: tuple(
                HarnessRevision(
                    position=r["position"],
                    sha=r["sha"],
                    kernel_names=tuple(r["kernel_names"]),
                    changed=tuple(r["changed"]),
                    removed=bool(r.get("removed", False)),
                    providers=None if r.get("providers") is None else tuple(r["providers"]),
                )
                for r in revisions
            )
            for script, revisions in doc["scripts"].items()
        }
        self._kernels: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
            name: (tuple(entry["scripts"]), tuple(entry["revisions"]))
            for name, entry in doc["kernels"].items()
        }
        # kernel name -> position -> the providers that revision touched (absent: all of them).
        self._touched: dict[str, dict[int, frozenset[str]]] = {
            name: {int(p): frozenset(who) for p, who in entry.get("providers", {}).items()}
            for name, entry in doc["kernels"].items()
        }
        self._patterns = sorted(k for k in self._kernels if "*" in k)

    def _names(self, kernel_name: str) -> list[str]:
        # A script that formats its kernel name (`dyt_beta=*`) is listed by pattern.
        found = [kernel_name] if kernel_name in self._kernels else []
        return found + [p for p in self._patterns if fnmatch.fnmatchcase(kernel_name, p)]

    def _entries(self, kernel_name: str) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
        return [self._kernels[name] for name in self._names(kernel_name)]

    def known(self, kernel_name: str) -> bool:
        return bool(self._names(kernel_name))

    def revisions(self, kernel_name: str, provider: str | None = None) -> list[int]:
        """Positions at which what `kernel_name`'s benchmark times changed, in order; with
        `provider`, only those that changed what that provider runs."""
        found: set[int] = set()
        for name in self._names(kernel_name):
            touched = self._touched[name]
            found.update(
                p
                for p in self._kernels[name][1]
                if provider is None or p not in touched or provider in touched[p]
            )
        return sorted(found)

    def touched(self, kernel_name: str, position: int) -> frozenset[str] | None:
        """The providers whose timed code the revision at `position` changed; None: all of
        them (or no revision there)."""
        found: set[str] = set()
        for name in self._names(kernel_name):
            if position not in self._kernels[name][1]:
                continue
            who = self._touched[name].get(position)
            if who is None:
                return None
            found |= who
        return frozenset(found) if found else None

    def kernel_scripts(self, kernel_name: str) -> list[str]:
        return sorted({s for scripts, _ in self._entries(kernel_name) for s in scripts})

    def between(
        self, kernel_name: str, before: int, after: int, provider: str | None = None
    ) -> list[int]:
        """Revisions in (before, after]: a step measured across them is the harness's
        (with `provider`: only the revisions that changed that provider's code)."""
        positions = self.revisions(kernel_name, provider)
        lo = bisect.bisect_right(positions, before)
        hi = bisect.bisect_right(positions, after)
        return positions[lo:hi]

    def revision_at(
        self, kernel_name: str, position: int, provider: str | None = None
    ) -> int | None:
        """The latest revision at or before `position` (the harness a run there used; with
        `provider`, the harness that provider's run used)."""
        positions = self.revisions(kernel_name, provider)
        i = bisect.bisect_right(positions, position)
        return positions[i - 1] if i else None


def _read(path: Path | None, name: str) -> dict[str, Any]:
    if path is not None:
        return json.loads(Path(path).read_text())
    return json.loads(resources.files("kindex_etl.catalog").joinpath(name).read_text())


def load_history(path: Path | None = None) -> History:
    return History(_read(path, "history.json")) if path is not None else _packaged_history()


def load_harness(path: Path | None = None) -> Harness:
    return Harness(_read(path, "harness.json")) if path is not None else _packaged_harness()


@cache
def _packaged_history() -> History:
    return History(_read(None, "history.json"))


@cache
def _packaged_harness() -> Harness:
    return Harness(_read(None, "harness.json"))


def position(sha: str) -> int | None:
    return _packaged_history().position(sha)


def first_release(sha: str) -> str | None:
    return _packaged_history().first_release(sha)


def harness_revisions(kernel_name: str, provider: str | None = None) -> list[int]:
    return _packaged_harness().revisions(kernel_name, provider)
