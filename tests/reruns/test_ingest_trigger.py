"""The trigger as the ingest runs it: history never triggers, a newer release once, CLI views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.cli import main
from kindex_etl.reruns import list_reruns
from kindex_etl.storage import open_store

from .helpers import add_release


@pytest.fixture(autouse=True)
def no_prefect_api(monkeypatch: pytest.MonkeyPatch) -> None:
    # The embedded default (whatever harness another test module may have left running).
    monkeypatch.setattr("kindex_etl.reruns.requests.prefect_api_url", lambda: None)


def test_history_never_triggers_and_a_newer_release_triggers_once(tmp_path: Path) -> None:
    up, wh = tmp_path / "up", tmp_path / "wh"
    add_release(up, "0.8.0")
    add_release(up, "0.8.1", minute=1)
    first = ingest(str(up), str(wh))
    assert first.new_versions == ["0.8.0", "0.8.1"] and first.reruns_triggered == []
    assert list_reruns(open_store(str(wh))) == []

    add_release(up, "0.8.5", minute=2)
    second = ingest(str(up), str(wh))
    assert second.new_versions == ["0.8.5"]
    (entry,) = second.reruns_triggered
    assert entry["version"] == "0.8.5" and entry["state"] == "manual"
    assert entry["flowRunId"] is None
    assert entry["howToRun"] == (
        f"kindex-etl rerun --version 0.8.5 --baseline 0.8.1 --upstream {up} --warehouse {wh}"
    )
    (record,) = list_reruns(open_store(str(wh)))
    assert record["version"] == "0.8.5" and "newer than 0.8.1" in record["reason"]
    assert record["requestedAt"].endswith("Z") and record["upstream"] == str(up)

    # An older version arriving late is history; the same version again is not new.
    add_release(up, "0.7.9", minute=3)
    add_release(up, "0.8.5", minute=4)
    third = ingest(str(up), str(wh))
    assert third.new_versions == ["0.7.9"] and third.reruns_triggered == []
    assert len(list_reruns(open_store(str(wh)))) == 1


def test_backfill_and_dev_versions_trigger_nothing(tmp_path: Path) -> None:
    up, wh = tmp_path / "up", tmp_path / "wh"
    add_release(up, "0.8.0")
    ingest(str(up), str(wh))
    add_release(up, "0.9.0", minute=1)
    add_release(up, "0.9.1.dev0", minute=2)
    # What the ingest flow does on --backfill: trigger off.
    summary = ingest(str(up), str(wh), IngestOptions(backfill=True, trigger=False))
    assert summary.new_versions == ["0.9.0", "0.9.1.dev0"] and summary.reruns_triggered == []
    add_release(up, "0.9.2.dev1", minute=3)
    assert ingest(str(up), str(wh)).reruns_triggered == []  # not on PyPI: never
    assert list_reruns(open_store(str(wh))) == []


def test_reruns_cli_lists_and_requests_by_hand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up, wh = tmp_path / "up", tmp_path / "wh"
    add_release(up, "0.8.0")
    ingest(str(up), str(wh))
    add_release(up, "0.8.5", minute=1)
    ingest(str(up), str(wh))
    capsys.readouterr()

    assert main(["reruns", "--warehouse", str(wh), "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["reruns"]
    assert record["version"] == "0.8.5" and record["state"] == "manual"

    # History can still be asked for by hand, exactly once.
    args = ["reruns", "--warehouse", str(wh), "--request", "0.8.0", "--upstream", str(up)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "0.8.0: manual" in out and "0.8.5: manual" in out and "2 re-run request(s)" in out
    assert "run it with: kindex-etl rerun --version 0.8.0" in out
    assert main(args) == 0
    assert "already requested" in capsys.readouterr().err
    assert main(["reruns", "--warehouse", str(wh), "--request", "../x"]) == 2
