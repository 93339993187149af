"""`kindex-etl triage`: verdicts committed to the warehouse's `triage` table, shown by the report,
and `invalid` ones counted as false alarms; locally and on S3 (moto's server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kindex_etl.analysis.run import run_regressions
from kindex_etl.cli import main
from kindex_etl.load import layout
from kindex_etl.load.warehouse import existing_warehouse, open_warehouse
from kindex_etl.report.triage import TriageError, read_verdicts, record_verdict
from kindex_etl.storage import open_store
from tests.analysis.helpers import build_warehouse, series_rows


def _stepped_warehouse(tmp: Path) -> str:
    steps = [
        series_rows([0.1] * 4 + [0.13] * 4, x=str(x), day=1 + i) for i, x in enumerate((1024, 2048))
    ]
    return build_warehouse(tmp, steps)


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    wh = _stepped_warehouse(tmp_path)
    assert len(run_regressions(wh).alerts) == 2
    return wh


def _alerts(wh: str) -> list[str]:
    warehouse = existing_warehouse(wh)
    assert warehouse is not None
    table = warehouse.read_table(layout.REGRESSIONS, ["change_id", "state"])
    assert table is not None
    return sorted(c for c, s in zip(*table.to_pydict().values(), strict=True) if s == "alert")


def test_a_verdict_is_a_commit_and_the_report_shows_it(
    warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _alerts(warehouse)
    head = open_warehouse(warehouse, create=False)
    head.refresh()
    before = head.head
    prefix = first.removeprefix("sha256:")[:12]
    rc = main(["triage", prefix, "--state", "invalid", "--note", "host swap", "--by", "ana",
               "--warehouse", warehouse])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert first in out and "invalid" in out
    assert main(["triage", second, "--state", "acknowledged", "--warehouse", warehouse]) == 0
    wh = open_warehouse(warehouse, create=False)
    wh.refresh()
    assert wh.head == before + 2  # one commit per verdict, through the log
    assert len(wh.files(layout.TRIAGE)) == 2
    verdicts = read_verdicts(open_store(warehouse))
    assert verdicts[first]["state"] == "invalid" and verdicts[first]["note"] == "host swap"
    assert verdicts[first]["author"] == "ana" and verdicts[first]["change_state"] == "alert"
    assert verdicts[second]["state"] == "acknowledged"

    # A later verdict on the same change wins.
    assert main(["triage", second, "--state", "expected", "--warehouse", warehouse]) == 0
    assert read_verdicts(open_store(warehouse))[second]["state"] == "expected"

    report = Path(run_regressions(warehouse).report or "")
    index = report.read_text()
    assert 'class="chip v-invalid" title="host swap' in index
    assert 'class="chip v-expected"' in index
    # Of the two alerts judged, one invalid: a measured false-alarm rate of 50 %.
    row = re.search(r"<tr><td>all alerts</td>(.*?)</tr>", index)
    assert row is not None
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))[:3] == ["1", "2", "50%"]
    kernel = (report.parent / "megatron_rms_norm.html").read_text()
    assert "v-invalid" in kernel


def test_unknown_or_ambiguous_changes_and_bad_states_are_refused(
    warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["triage", "0123456789abcdef", "--state", "invalid", "--warehouse", warehouse]) == 2
    assert "no change" in capsys.readouterr().err
    assert main(["triage", "ab", "--state", "invalid", "--warehouse", warehouse]) == 2
    assert "at least 8" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["triage", _alerts(warehouse)[0], "--state", "wontfix", "--warehouse", warehouse])
    with pytest.raises(TriageError, match="verdict must be"):
        record_verdict(open_store(warehouse), _alerts(warehouse)[0], "wontfix")
    assert read_verdicts(open_store(warehouse)) == {}


def test_triage_on_s3(tmp_path: Path, s3_bucket: str) -> None:
    from kindex_etl.api import IngestOptions, ingest
    from tests.helpers import write_csv

    up = tmp_path / "up"
    write_csv(up / "benchmarks/0000/benchmark.csv", series_rows([0.1] * 4 + [0.13] * 4))
    url = f"s3://{s3_bucket}/wh"
    ingest(str(up), url, IngestOptions(trigger=False))
    result = run_regressions(url)
    (alert,) = [c["change_id"] for c in result.alerts]
    assert main(["triage", alert, "--state", "invalid", "--warehouse", url]) == 0
    assert read_verdicts(open_store(url))[alert]["state"] == "invalid"
    store = open_store(url)
    chip = 'class="chip v-invalid"'
    # Not yet: the report is rewritten by the next analysis, or at once with --report.
    assert chip not in store.get_bytes("reports/index.html").decode()
    assert main(["triage", alert, "--state", "invalid", "--note", "again", "--report",
                 "--warehouse", url]) == 0  # fmt: skip
    assert chip in store.get_bytes("reports/index.html").decode()
    assert 'title="again' in store.get_bytes("reports/index.html").decode()
    # The kernel page's one script is the shared asset, beside it in the bucket.
    page = store.get_bytes("reports/megatron_rms_norm.html").decode()
    (asset,) = re.findall(r'<script src="([^"]+)"', page)
    assert re.fullmatch(r"plotly-\d+\.\d+\.\d+\.min\.js", asset)
    head = store.head("reports/" + asset)
    assert head is not None and head.size > 1_000_000


def test_the_latest_verdict_survives_the_daily_compaction(warehouse: str) -> None:
    """Found by review: delta-rs's compaction writes a file's rows newest commit first, and
    the verdict in force was the row last in file order. It is the latest `recorded_at` now,
    as a Delta reader can order them."""
    from datetime import UTC, datetime, timedelta

    from kindex_etl.maintenance import compact

    first, _ = _alerts(warehouse)
    store = open_store(warehouse)
    at = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    for i, verdict in enumerate(("acknowledged", "expected", "invalid")):
        record_verdict(store, first, verdict, now=at + timedelta(minutes=i))
    assert read_verdicts(store)[first]["state"] == "invalid"
    assert compact(warehouse).commit is not None
    wh = open_warehouse(warehouse, create=False)
    wh.refresh()
    assert len(wh.files(layout.TRIAGE)) == 1  # the three merged into one file
    assert read_verdicts(store)[first]["state"] == "invalid"
