"""Columns the report reads where they exist, and what it does where they do not.

The regressions table grows (commit ranges, origins, causes such as `environment` or
`harness`); the report takes whichever of these names a row has and works without them:
grouping falls back to `state`, compare links to release tags, hover text leaves the line out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .page import present, text

UPSTREAM = "https://github.com/linkedin/Liger-Kernel"

CAUSE = ("cause", "alert_cause", "classification")
BEFORE_COMMIT = ("before_commit", "last_commit_before", "commit_before", "before_sha")
AFTER_COMMIT = ("after_commit", "first_commit_after", "commit_after", "after_sha")
POINT_COMMIT = ("commit", "commit_sha", "upstream_commit", "source_commit")
ORIGIN = ("origin", "run_origin")
SHIPPED_IN = ("shipped_in", "first_release", "release_shipped")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")


def first(row: Mapping[str, Any], names: tuple[str, ...]) -> str:
    """The first of `names` the row has a value for, as text ("" where none)."""
    for name in names:
        v = row.get(name)
        if present(v):
            return str(v)
    return ""


def group_of(change: Mapping[str, Any]) -> str:
    """What a change is grouped by on the index: its cause where the table has one, else its
    state (today: alert, improvement, pending)."""
    return first(change, CAUSE) or text(change.get("state"), "unknown")


def compare_url(change: Mapping[str, Any]) -> str:
    """Upstream's compare view for a change's range: commits where both are known, else the
    release tags (`v0.8.0...v0.8.1`)."""
    a, b = first(change, BEFORE_COMMIT), first(change, AFTER_COMMIT)
    if _SHA.match(a) and _SHA.match(b):
        return f"{UPSTREAM}/compare/{a}...{b}"
    before, after = text(change.get("before_release")), text(change.get("after_release"))
    if not before or not after:
        return ""
    return f"{UPSTREAM}/compare/v{before}...v{after}"


def range_label(change: Mapping[str, Any]) -> str:
    a, b = first(change, BEFORE_COMMIT), first(change, AFTER_COMMIT)
    releases = (
        f"{text(change.get('before_release'), '?')} → {text(change.get('after_release'), '?')}"
    )
    if a and b:
        return f"{releases} ({a[:7]}…{b[:7]})"
    return releases


def series_anchor(series_key: str) -> str:
    """The element id a series has on its kernel page (stable: from the series key)."""
    return "s-" + series_key.split(":")[-1][:16]
