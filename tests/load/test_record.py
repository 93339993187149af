"""The typed commit record reads and writes the log's JSON, and tolerates newer fields."""

from __future__ import annotations

import json

from kindex_etl.load.record import CommitRecord, Counts, FileEntry, ObjectEntry, Writer


def test_round_trip_keeps_the_log_keys_and_order() -> None:
    record = CommitRecord(
        batch="0123456789abcdef",
        objects=[ObjectEntry(key="a.csv", etag="e1", rows=3, runs=2, quarantined=1)],
        files=[FileEntry(key="benchmark_runs/release=0.8.0/part-x.parquet", rows=2)],
        versions=["0.8.0"],
        counts=Counts(rows=3, runs=2, quarantined=1, quarantined_by_reason={"unknown_gpu": 1}),
        seq=7,
        committed_at="2026-12-01T00:00:00.000Z",
        writer=Writer(host="h", pid=1),
    )
    payload = record.to_json()
    data = json.loads(payload)
    assert list(data) == sorted(data)  # sorted keys, as readers of the log have always seen
    assert data["committedAt"] == "2026-12-01T00:00:00.000Z" and data["seq"] == 7
    assert data["objects"][0]["status"] == "ingested"
    assert CommitRecord.from_json(payload) == record


def test_a_record_not_yet_committed_has_no_seq_and_newer_fields_are_ignored() -> None:
    assert "seq" not in json.loads(CommitRecord(batch="b").to_json())
    newer = json.dumps({"batch": "b", "seq": 2, "somethingNew": [1, 2]}).encode()
    assert CommitRecord.from_json(newer).seq == 2
