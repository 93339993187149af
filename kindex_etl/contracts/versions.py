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


def canonical_version(text: str) -> str:
    """`text` if it is a release exactly as PEP 440 normalizes it; else the row is held back.

    A liger_version becomes a partition folder (`release=<v>`) and an implementation's
    identity, so it is untrusted text that reaches a key. We hold back rather than rewrite:
    `' 0.8.0 '`, `'0.8.0\t'` or `'v0.8'` would have to be guessed into a release, and a guess
    would merge runs under a version upstream never wrote. Raises `Rejected("bad_version")`.
    """
    from kindex_etl.errors import Rejected

    version = parse_version(text)
    if version is None or str(version) != text:
        hint = f" (PEP 440 spells it {str(version)!r})" if version is not None else ""
        raise Rejected("bad_version", f"liger_version {text!r} is not a canonical release{hint}")
    return text


def version_key(text: str) -> tuple[int, Version | str]:
    """A sort key: valid versions in PEP 440 order first, anything else after, by text."""
    v = parse_version(text)
    return (0, v) if v is not None else (1, text)


def sort_versions(versions: Iterable[str]) -> list[str]:
    return sorted(versions, key=version_key)
