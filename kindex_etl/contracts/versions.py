"""Release order: PEP 440 (`packaging.version`), the one order every stage sorts releases by."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.version import InvalidVersion, Version


def parse_version(text: str) -> Version | None:
    """The version, or None when the text is not PEP 440."""
    try:
        return Version(text)
    except (InvalidVersion, TypeError):
        return None


def version_key(text: str) -> tuple[int, Version | str]:
    """A sort key: valid versions in PEP 440 order first, anything else after, by text."""
    v = parse_version(text)
    return (0, v) if v is not None else (1, text)


def sort_versions(versions: Iterable[str]) -> list[str]:
    return sorted(versions, key=version_key)
