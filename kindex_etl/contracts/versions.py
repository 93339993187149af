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


_PRE_LETTER = {"a": "a", "b": "b", "rc": "c"}
_W = 6  # digits per number: release parts and counters up to 999,999


def release_key(text: str) -> str | None:
    """A text key whose plain string order is PEP 440's order; None when `text` is not PEP 440.

    For consumers without `packaging` (SQL's `max`, `ORDER BY`): fixed-width fields mirror
    packaging's own comparison key, so `0.5.10` sorts after `0.5.8` and `1.0rc1` before `1.0`.
    The local segment (`+abc`) is ignored.
    """
    v = parse_version(text)
    if v is None or len(v.release) > 4 or max((*v.release, v.epoch)) >= 10**_W:
        return None

    def n(x: int) -> str:
        return f"{x:0{_W}d}"

    release = ".".join(n(p) for p in (*v.release, 0, 0, 0)[:4])
    # packaging: a dev release without pre/post sorts before every pre-release of its version.
    if v.pre is not None:
        pre = f"1{_PRE_LETTER[v.pre[0]]}{n(v.pre[1])}"
    elif v.post is None and v.dev is not None:
        pre = "0"
    else:
        pre = "2"
    post = "0" if v.post is None else f"1{n(v.post)}"
    dev = "1" if v.dev is None else f"0{n(v.dev)}"
    return f"{n(v.epoch)}!{release}-{pre}-{post}-{dev}"
