"""The request record: the baseline it names, and shards reporting back into it."""

from __future__ import annotations

from pathlib import Path

from kindex_etl import open_warehouse
from kindex_etl.reruns import baseline_for, list_reruns, mark_finished, request_rerun


def test_baseline_is_the_newest_older_release() -> None:
    held = ["0.8.0", "0.8.4", "0.8.3", "0.9.0", "0.8.5.dev1", "0.8.4+local", "junk"]
    assert baseline_for(held, "0.8.5") == "0.8.4"
    assert baseline_for(held, "0.8.0") is None
    assert baseline_for(held, "1.0.0rc1") == "0.9.0"


def test_shards_report_into_one_record(tmp_path: Path) -> None:
    wh = open_warehouse(str(tmp_path / "wh"))
    record = request_rerun(wh, "0.8.5", reason="t", api_url="", resolve_prefect=False)
    assert record is not None and record["state"] == "manual"

    def report(index: int, ok: bool) -> dict[str, object]:
        out = mark_finished(
            str(tmp_path / "wh"), "0.8.5", shard_index=index, shard_count=2, ok=ok,
            outcome={"campaignId": "C", "runIds": [f"C-0.8.5-r1-s{index}"], "rows": 10},
        )  # fmt: skip
        assert out is not None
        return out

    assert report(1, True)["state"] == "running"  # shard 0 has not reported yet
    done = report(0, True)
    assert done["state"] == "succeeded" and done["rows"] == 20
    assert sorted(done["runIds"]) == ["C-0.8.5-r1-s0", "C-0.8.5-r1-s1"]  # type: ignore[arg-type]
    assert report(1, False)["state"] == "failed"  # a shard run again, and failing
    (stored,) = list_reruns(wh.store)
    assert stored["state"] == "failed" and stored["runId"] == "C"
