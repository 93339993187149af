"""What the analysis asks of upstream's history: positions, first releases, harness revisions.

The data is the generated catalog (`kindex_etl/catalog/history.json` and `harness.json`, read by
`kindex_etl.catalog.history`; `scripts/catalog_history.py` makes them from a Liger-Kernel
checkout): main's first-parent commits with their position (0 = oldest) and the first release
tag that contains them, and per upstream `kernel_name` the commits at which what its benchmark
times changed (a series breaks there). `default_history()` is that catalog seen through this
module's `History`; `History.of` builds one from plain data (tests, other sources).

Absent files make an empty history: every commit's position unknown, no harness revision.
Lookups take any prefix of 7 or more hex digits (a folder's short sha, a longer sha).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

SHORT = 7


@dataclass(frozen=True)
class Commit:
    sha: str
    position: int
    date: str | None = None
    release: str | None = None  # first release tag that contains it (`v0.6.5`); None: none yet


def _short(sha: str) -> str:
    return sha.strip().lower()[:SHORT]


@dataclass
class History:
    commits: dict[str, Commit] = field(default_factory=dict)  # by 7-digit sha
    harness: dict[str, list[str]] = field(default_factory=dict)  # kernel_name -> shas
    # kernel_name -> sha -> the providers that revision touched (absent: every provider).
    harness_providers: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tags: dict[str, Commit] = {}
        for c in self.commits.values():
            if c.release is not None:
                held = self._tags.get(c.release)
                # A tag's commit is the newest commit it is the first release of.
                if held is None or c.position > held.position:
                    self._tags[c.release] = c
        self._revisions: dict[str, list[tuple[int, str]]] = {}
        for kernel, shas in self.harness.items():
            known = sorted(
                (c.position, c.sha) for c in (self.commits.get(_short(s)) for s in shas) if c
            )
            self._revisions[kernel] = known

    def __bool__(self) -> bool:
        return bool(self.commits)

    @property
    def has_harness(self) -> bool:
        return bool(self.harness)

    def commit(self, sha: str | None) -> Commit | None:
        return self.commits.get(_short(sha)) if sha else None

    def position(self, sha: str | None) -> int | None:
        c = self.commit(sha)
        return c.position if c else None

    def first_release(self, sha: str | None) -> str | None:
        c = self.commit(sha)
        return c.release if c else None

    def tag_commit(self, tag: str | None) -> Commit | None:
        return self._tags.get(tag) if tag else None

    def harness_revision(
        self, kernel_name: str | None, position: int | None, provider: str | None = None
    ) -> str | None:
        """The newest harness revision of `kernel_name` at or before `position`; None where
        the kernel has none before it or the position is unknown. With `provider`, only the
        revisions that changed that provider's timed code count (the catalog's
        `Harness.revision_at(..., provider)`); without, every revision does."""
        if kernel_name is None or position is None:
            return None
        touched = self.harness_providers.get(kernel_name, {})
        found = None
        for pos, sha in self._revisions.get(kernel_name, ()):
            if pos > position:
                break
            who = touched.get(sha)
            if provider is None or who is None or provider in who:
                found = sha
        return found

    @classmethod
    def of(cls, history: Any, harness: Any = None) -> History:
        """From the two files' parsed JSON (shapes in the module doc; a list of commit objects
        or a sha-keyed object are both read, with or without a top-level `commits` key). A
        revision given as `{"sha": ..., "providers": [...]}` touches only those providers."""
        return cls(_commits(history), _harness(harness), _harness_providers(harness))


def _commits(data: Any) -> dict[str, Commit]:
    if isinstance(data, Mapping) and "commits" in data:
        data = data["commits"]
    items: Iterable[tuple[str, Any]]
    if isinstance(data, Mapping):
        items = data.items()
    elif isinstance(data, list):
        items = ((str(d.get("sha", "")), d) for d in data if isinstance(d, Mapping))
    else:
        return {}
    out: dict[str, Commit] = {}
    for sha, info in items:
        if not sha or not isinstance(info, Mapping) or info.get("position") is None:
            continue
        release = info.get("release", info.get("first_release"))
        out[_short(sha)] = Commit(_short(sha), int(info["position"]), info.get("date"), release)
    return out


def _harness(data: Any) -> dict[str, list[str]]:
    if isinstance(data, Mapping) and "kernels" in data:
        data = data["kernels"]
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, list[str]] = {}
    for kernel, revs in data.items():
        if isinstance(revs, Mapping):
            revs = revs.get("revisions", revs.get("commits", []))
        out[str(kernel)] = [
            str(r.get("sha") if isinstance(r, Mapping) else r) for r in revs or [] if r
        ]
    return out


def _harness_providers(data: Any) -> dict[str, dict[str, frozenset[str]]]:
    if isinstance(data, Mapping) and "kernels" in data:
        data = data["kernels"]
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, dict[str, frozenset[str]]] = {}
    for kernel, revs in data.items():
        if isinstance(revs, Mapping):
            revs = revs.get("revisions", revs.get("commits", []))
        for r in revs or []:
            if isinstance(r, Mapping) and r.get("sha") and r.get("providers") is not None:
                out.setdefault(str(kernel), {})[_short(str(r["sha"]))] = frozenset(r["providers"])
    return out


def from_catalog(history: Any, harness: Any) -> History:
    """The analysis' view of `kindex_etl.catalog.history`'s `History` and `Harness` (the
    generated catalog): commits by short sha, release tags' commits, and each kernel name's
    harness revisions as commits (patterns such as `dyt_beta=*` resolved by the catalog)."""
    commits = {
        _short(c.sha): Commit(_short(c.sha), c.position, c.date.isoformat(), c.release)
        for c in history.commits
    }
    view = _CatalogHistory(commits)
    view.catalog_history, view.catalog_harness = history, harness
    return view


class _CatalogHistory(History):
    catalog_history: Any = None
    catalog_harness: Any = None

    def tag_commit(self, tag: str | None) -> Commit | None:
        release = self.catalog_history.release(tag) if tag else None
        if release is None or release.position is None:
            return None
        return self.commits.get(_short(release.sha))

    def harness_revision(
        self, kernel_name: str | None, position: int | None, provider: str | None = None
    ) -> str | None:
        if kernel_name is None or position is None:
            return None
        at = self.catalog_harness.revision_at(kernel_name, position, provider)
        return None if at is None else _short(self.catalog_history.at(at).sha)

    @property
    def has_harness(self) -> bool:
        return True


def load(folder: Path | None = None) -> History:
    """The generated catalog's history and harness (`folder`: where `history.json` and
    `harness.json` are, default the packaged ones); an empty history where they are absent."""
    from kindex_etl.catalog import history as catalog

    try:
        if folder is None:
            return from_catalog(catalog.load_history(), catalog.load_harness())
        return from_catalog(
            catalog.load_history(folder / "history.json"),
            catalog.load_harness(folder / "harness.json"),
        )
    except FileNotFoundError:
        return History()


@cache
def default_history() -> History:
    return load()
