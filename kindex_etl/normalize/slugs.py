"""Slugs used in externalIds, workload slugs and metadata names."""

from __future__ import annotations

import math
import re

_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_NON_VALUE = re.compile(r"[^a-z0-9.+-]+")

NAME_LIMIT = 100


def slug(text: str) -> str:
    """Lower-case, every run of other characters becomes one '-'."""
    return _NON_ALNUM.sub("-", text.lower()).strip("-")


def compact(text: str) -> str:
    """A raw parameter name as a slug word: 'C_in' -> 'cin'."""
    return _NON_ALNUM.sub("", text.lower())


def value_slug(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value).lower() if math.isfinite(value) else slug(repr(value))
    return _NON_VALUE.sub("-", str(value).lower()).strip("-")


def timestamp_slug(timestamp: str) -> str:
    """'2026-06-10 21:03:42' -> '2026-06-10-21-03-42'."""
    return timestamp.replace(" ", "-").replace(":", "-")
