"""The reply to the commit record's PUT is lost, the PUT landed: the run still tells the truth."""

from __future__ import annotations

import json

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.errors import PreconditionFailed, StorageError
from kindex_etl.load import layout
from kindex_etl.storage import LocalStore
from tests.helpers import row, seed_row, table, write_csv


@pytest.mark.parametrize("lost_as", [PreconditionFailed, StorageError])
def test_lost_reply_to_the_record_put_is_resolved_by_reading_it_back(
    tmp_path, monkeypatch, lost_as
):
    # PreconditionFailed: the SDK retried and met our own record; StorageError: retries ran out.
    real_put = LocalStore.put_bytes
    lost: list[str] = []

    def put_bytes(self, key, data, **kwargs):
        etag = real_put(self, key, data, **kwargs)
        if key.startswith(layout.LOG) and not lost:
            lost.append(key)
            raise lost_as(f"put {key}: reply lost")
        return etag

    monkeypatch.setattr(LocalStore, "put_bytes", put_bytes)
    write_csv(tmp_path / "up" / "a.csv", [seed_row(), row(kernel_provider="liger")])
    summary = ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))
    assert lost == [layout.log_key(1)]
    assert summary.commits == [1]
    assert summary.runs_written == 2
    snapshot = json.loads((tmp_path / "wh" / layout.SNAPSHOT).read_text())
    assert snapshot["seq"] == 1 and snapshot["tables"]["benchmark_runs"]
    assert table(tmp_path / "wh", "benchmark_runs").num_rows == 2
    assert not (tmp_path / "wh" / layout.STAGING).exists() or not any(
        p.is_file() for p in (tmp_path / "wh" / layout.STAGING).rglob("*")
    )


def test_a_record_that_is_not_ours_is_not_claimed(tmp_path, monkeypatch):
    # Someone else's record at our sequence number: our PUT really lost, and we say so.
    real_put = LocalStore.put_bytes
    calls: list[str] = []

    def put_bytes(self, key, data, **kwargs):
        if key.startswith(layout.LOG) and not calls:
            calls.append(key)
            real_put(self, key, b'{"batch": "someone-else"}', **kwargs)
            raise StorageError(f"put {key}: reply lost")
        return real_put(self, key, data, **kwargs)

    monkeypatch.setattr(LocalStore, "put_bytes", put_bytes)
    from kindex_etl.load.record import CommitRecord
    from kindex_etl.load.warehouse import open_warehouse

    warehouse = open_warehouse(str(tmp_path / "wh"))
    with pytest.raises(StorageError, match="reply lost"):
        warehouse.commit(CommitRecord(batch="ours"))
    assert 1 not in {r.seq for r in warehouse.records}
