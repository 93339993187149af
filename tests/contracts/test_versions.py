"""Release order is PEP 440, never text order; release_key carries it into plain text."""

import random

from packaging.version import Version

from kindex_etl.contracts.versions import parse_version, release_key, sort_versions, version_key


def test_pep440_order_then_invalid_versions_last() -> None:
    assert sort_versions(["0.5.10", "0.5.8", "0.10.0rc1", "0.10.0", "not-a-version"]) == [
        "0.5.8",
        "0.5.10",
        "0.10.0rc1",
        "0.10.0",
        "not-a-version",
    ]
    assert parse_version("0.8.x") is None
    assert version_key("0.8.0") < version_key("0.8.0.post1")


VERSIONS = [
    "0.5.8", "0.5.10", "0.5.9", "0.8.5", "0.10.0", "1.0", "1.0.0.post1", "1.0rc1", "1.0rc2",
    "1.0a1", "1.0b2", "1.0.dev3", "1.0a1.dev1", "1.0.post1.dev2", "1!0.1", "0.8.4", "2.0",
    "0.9", "0.9.0.1", "10.0.0", "1.0rc1.post1",
]  # fmt: skip


def test_string_order_of_keys_is_pep440_order():
    shuffled = VERSIONS[:]
    random.Random(7).shuffle(shuffled)
    by_key = sorted(shuffled, key=lambda v: release_key(v) or "")
    by_pep440 = sorted(shuffled, key=Version)
    # Equal versions (1.0 == 1.0.0) may come in either order; compare as versions.
    assert [Version(v) for v in by_key] == [Version(v) for v in by_pep440]
    assert max(["0.5.10", "0.5.8"], key=lambda v: release_key(v) or "") == "0.5.10"


def test_equal_versions_share_a_key_and_junk_has_none():
    assert release_key("1.0") == release_key("1.0.0") == release_key("1.0.0+local")
    assert release_key("not-a-version") is None
    assert release_key("1.2.3.4.5") is None  # more parts than the key holds: no wrong order
