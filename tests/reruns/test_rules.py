"""The trigger rule: which new versions are releases that deserve a GPU re-run."""

from __future__ import annotations

from kindex_etl.reruns.policy import decide, is_requestable, to_trigger


def _triggered(before: set[str], new: list[str]) -> list[str]:
    return [d.version for d in to_trigger(before, new)]


def test_first_load_triggers_nothing() -> None:
    assert _triggered(set(), ["0.8.0", "0.8.5"]) == []
    (d,) = decide(set(), ["0.8.5"])
    assert "first load" in d.reason


def test_newer_than_every_known_version_triggers() -> None:
    assert _triggered({"0.8.0", "0.8.1"}, ["0.8.5"]) == ["0.8.5"]
    # PEP 440 order, not text order.
    assert _triggered({"0.9.0"}, ["0.10.0"]) == ["0.10.0"]
    assert _triggered({"0.8.5"}, ["0.8.10"]) == ["0.8.10"]


def test_older_or_equal_versions_are_history() -> None:
    assert _triggered({"0.8.5"}, ["0.8.1", "0.7.9"]) == []
    assert _triggered({"0.10.0"}, ["0.9.9"]) == []
    (d,) = decide({"0.8.5"}, ["0.8.1"])
    assert "history" in d.reason


def test_several_new_releases_each_trigger() -> None:
    assert _triggered({"0.8.0"}, ["0.8.5", "0.8.1", "0.7.0"]) == ["0.8.5", "0.8.1"]


def test_dev_local_and_invalid_versions_never_trigger() -> None:
    assert _triggered({"0.8.0"}, ["0.9.0.dev3", "0.9.0+cu130", "nightly", ""]) == []
    assert _triggered({"0.8.0"}, ["0.9.0rc1"]) == ["0.9.0rc1"]
    assert _triggered({"0.9.0rc1"}, ["0.9.0"]) == ["0.9.0"]
    # Unorderable old values are ignored, not fatal.
    assert _triggered({"garbage", "0.8.0"}, ["0.8.1"]) == ["0.8.1"]
    assert _triggered({"garbage"}, ["0.8.1"]) == []


def test_requestable_versions_are_safe_keys() -> None:
    assert is_requestable("0.8.5") and is_requestable("1!2.0.post1")
    for bad in ("../x", "0.8.5/../../a", " 0.8.5", "0.8.5.dev1", "0.8.5+local", ""):
        assert not is_requestable(bad)
