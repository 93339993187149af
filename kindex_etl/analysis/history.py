"""Upstream's history as catalog data: commit positions, first releases, harness revisions.

Two files in `kindex_etl/catalog/`, made from a Liger-Kernel checkout by the catalog command
(not edited by hand):

- `history.json`: upstream main's first-parent commits, short sha -> position (0 = oldest),
  date, and the first release tag that contains it;
- `harness.json`: per upstream `kernel_name`, the commits at which its benchmark script or the
  reference modules it imports changed (a series breaks there).

Absent files make an empty history: every commit's position unknown, no harness revision.
Lookups take any prefix of 7 or more hex digits (a folder's short sha, a longer sha).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
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

    def harness_revision(self, kernel_name: str | None, position: int | None) -> str | None:
        """The newest harness revision of `kernel_name` at or before `position`; None where
        the kernel has none before it or the position is unknown."""
        if kernel_name is None or position is None:
            return None
        found = None
        for pos, sha in self._revisions.get(kernel_name, ()):
            if pos > position:
                break
            found = sha
        return found

    @classmethod
    def of(cls, history: Any, harness: Any = None) -> History:
        """From the two files' parsed JSON (shapes in the module doc; a list of commit objects
        or a sha-keyed object are both read, with or without a top-level `commits` key)."""
        return cls(_commits(history), _harness(harness))


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


def load(folder: Path | None = None) -> History:
    """`history.json` and `harness.json` from `folder` (default: the packaged catalog)."""

    def read(name: str) -> Any:
        if folder is not None:
            path = folder / name
            return json.loads(path.read_text()) if path.exists() else None
        res = resources.files("kindex_etl.catalog").joinpath(name)
        return json.loads(res.read_text()) if res.is_file() else None

    return History.of(read("history.json"), read("harness.json"))


@cache
def default_history() -> History:
    return load()
