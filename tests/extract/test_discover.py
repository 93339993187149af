"""Candidates: every *.csv at any depth, with the host facts of a sidecar environment.json."""

from __future__ import annotations

import json
from pathlib import Path

from kindex_etl.extract.discover import discover, pending
from kindex_etl.storage import LocalStore


def test_every_csv_in_key_order_and_sidecar_software(tmp_path: Path) -> None:
    (tmp_path / "b" / "deep").mkdir(parents=True)
    (tmp_path / "a.csv").write_text("x")
    (tmp_path / "b" / "deep" / "run.CSV").write_text("x")
    (tmp_path / "b" / "deep" / "environment.json").write_text(
        json.dumps({"gpu_name": "H", "software": {"torch": "2.11", "cuda": None}})
    )
    (tmp_path / "b" / "notes.txt").write_text("x")
    found = discover(LocalStore(tmp_path))
    assert [c.key for c in found] == ["a.csv", "b/deep/run.CSV"]
    assert found[0].software == "" and json.loads(found[1].software) == {"torch": "2.11"}


def test_pending_compares_etags(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("x")
    (tmp_path / "b.csv").write_text("y")
    found = discover(LocalStore(tmp_path))
    done = {"a.csv": found[0].info.etag, "b.csv": "an older version"}
    assert [c.key for c in pending(found, done)] == ["b.csv"]
