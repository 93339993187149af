"""Release order is PEP 440, never text order."""

from kindex_etl.contracts.versions import parse_version, sort_versions, version_key


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
