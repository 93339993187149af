"""Issue 32, "commands that tell the truth", in-process (none of these needs Prefect).

A URL that holds no warehouse is an error for every command that reads or maintains one;
every command takes its warehouse from KINDEX_WAREHOUSE; `regressions` and `quarantine` print
their totals first and their lines ranked; `compact` and `vacuum` speak words (JSON with
--json) and say nothing with -q.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.cli import main
from kindex_etl.load import delta
from tests.analysis.helpers import build_warehouse, series_rows
from tests.maintenance import hourly_upstream, ingest_hourly

READERS_AND_MAINTAINERS = [
    ["replay"],
    ["reprocess"],
    ["quarantine"],
    ["reruns"],
    ["reruns", "--request", "0.8.0", "--upstream", "{up}"],
    ["regressions"],
    ["regressions", "--dry-run"],
    ["compact"],
    ["vacuum"],
    # Issue 54: triage said "no change ... in the regressions table" here.
    ["triage", "0123456789abcdef", "--state", "invalid"],
]


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kindex-etl: error: "), err
    return lines[0]


@pytest.mark.parametrize("argv", READERS_AND_MAINTAINERS, ids=" ".join)
def test_an_empty_folder_is_no_warehouse(tmp_path: Path, capsys, argv: list[str]) -> None:
    empty = tmp_path / "typo"
    empty.mkdir()
    argv = [a.format(up=tmp_path) for a in argv]
    assert main([*argv, "--warehouse", str(empty)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert f"no warehouse at {empty}" in _one_error(out.err)
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("argv", READERS_AND_MAINTAINERS, ids=" ".join)
def test_an_s3_prefix_without_a_warehouse_is_an_error_and_stays_empty(
    tmp_path: Path, capsys, s3_bucket: str, s3_client: Any, argv: list[str]
) -> None:
    url = f"s3://{s3_bucket}/typo-prefix"
    argv = [a.format(up=tmp_path) for a in argv]
    assert main([*argv, "--warehouse", url]) == 2
    out = capsys.readouterr()
    assert out.out == "" and f"no warehouse at {url}" in _one_error(out.err)
    assert s3_client.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    """Series over eight releases with a 30 % step and 15 % steps: alerts (a 10 % step on
    four points after it is found, but under the z at which an alert is announced)."""
    big = [0.1] * 4 + [0.13] * 4
    small = [0.1] * 4 + [0.115] * 4
    return build_warehouse(
        tmp_path, [series_rows(small), series_rows(big, x="4096"), series_rows(small, x="8192")]
    )


@pytest.mark.parametrize(
    "argv",
    [["quarantine"], ["reruns"], ["regressions", "--dry-run"], ["compact"], ["vacuum"],
     ["replay"], ["reprocess"]],
    ids=" ".join,
)  # fmt: skip
def test_every_command_takes_its_warehouse_from_kindex_warehouse(
    warehouse: str, capsys, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("KINDEX_WAREHOUSE", warehouse)
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    json.loads(capsys.readouterr().out)


def test_regressions_print_the_summary_first_then_alerts_largest_first(
    warehouse: str, capsys
) -> None:
    assert main(["regressions", "--warehouse", warehouse]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "3 series, 24 runs at commit 1: 3 changes, 3 alerts (3 new)"
    assert lines[1].startswith("report: ")
    # Then the count by state, how many are listed, and the legend's two lines.
    assert lines[2] == "by state: 3 alert" and lines[3] == "listed: 3 of 3"
    assert lines[4].startswith("legend: ") and lines[5].startswith("states: ")
    changes = lines[6:]
    assert [line.split()[0] for line in changes] == ["alert"] * 3
    # The 30 % step, second in the input, comes first.
    assert "hidden4096" in changes[0] and changes[0].split()[1] == "x1.3"
    assert [line.split()[1] for line in changes[1:]] == ["x1.15", "x1.15"]


def test_quarantine_prints_the_summary_first_then_the_commonest_reason(
    tmp_path: Path, capsys
) -> None:
    from tests.warehouse import HEADER, put_objects

    wh = str(tmp_path / "wh")
    bad_gpu = (
        "megatron_rms_norm,torch,full,speed,ms,H,hidden size,{h},0.2,0.19,0.21,"
        '"{{""S"": 4096, ""B"": 1}}",Mystery Accelerator 9000,2026-06-01 22:00:00,0.8.0\n'
    )
    bad_value = (
        "megatron_rms_norm,torch,full,speed,ms,H,hidden size,1024,oops,0.19,0.21,"
        '"{""S"": 4096, ""B"": 1}",NVIDIA H100 80GB HBM3,2026-06-01 22:00:00,0.8.0\n'
    )
    text = HEADER + bad_value + "".join(bad_gpu.format(h=h) for h in (1024, 2048, 4096))
    put_objects(str(tmp_path / "up"), {"benchmarks/0001/benchmark.csv": text.encode()})
    ingest_hourly(str(tmp_path / "up"), wh)
    assert main(["quarantine", "--warehouse", wh]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("4 row(s) held back: unknown_gpu 3, ")
    assert [line.split(":")[0] for line in lines[1:4]] == ["unknown_gpu"] * 3
    assert not lines[4].startswith("unknown_gpu")


def _maintained(tmp_path: Path) -> str:
    upstream, wh = str(tmp_path / "up"), str(tmp_path / "wh")
    hourly_upstream(upstream, 3)
    ingest_hourly(upstream, wh)
    return wh


def test_compact_and_vacuum_speak_words_and_json(tmp_path: Path, capsys) -> None:
    wh = _maintained(tmp_path)
    assert main(["compact", "--warehouse", wh]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compacted in commit 4: ") and "benchmark_runs 6 -> 2" in out
    assert "{" not in out and "=" not in out
    assert main(["compact", "--warehouse", wh]) == 0
    assert capsys.readouterr().out.startswith("nothing to compact: ")
    assert main(["vacuum", "--warehouse", wh, "--retention-s", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vacuumed in commit 5: ") and "retired file(s) deleted" in out
    assert main(["vacuum", "--warehouse", wh, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "commit": None,
        "deleted": 0,
        "kept": 0,
        "delta_tables": len(delta.PUBLISH_ORDER) + 1,  # + document_files
    }


Quiet = Callable[[list[str]], None]


@pytest.mark.parametrize(
    "argv",
    [
        ["compact"],
        ["vacuum", "--retention-s", "0"],
        ["quarantine"],
        ["regressions"],
        ["reruns"],
        ["replay"],
        ["reprocess"],
    ],
    ids=" ".join,
)
def test_quiet_means_no_output(tmp_path: Path, capsys, argv: list[str]) -> None:
    wh = _maintained(tmp_path)
    for where in (["-q", *argv], [*argv, "-q"]):
        assert main([*where, "--warehouse", wh]) == 0
        out = capsys.readouterr()
        assert out.out == "" and out.err == ""
