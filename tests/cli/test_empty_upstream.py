"""Issue 54, "failing loudly": an ingest or backfill that finds no upstream CSV under its URL
or prefix exits 2 with one line and creates nothing; `--allow-empty` accepts it.

In-process (`main`): these fail before Prefect starts, and an allowed empty ingest is answered
without a flow run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.cli import main
from tests.helpers import seed_row, write_csv


def _upstream(root: Path) -> Path:
    write_csv(root / "benchmarks" / "0000001-v0.8.0" / "benchmark.csv", [seed_row()])
    return root


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kindex-etl: error: upstream: "), err
    return lines[0]


@pytest.mark.parametrize("command", ["ingest", "backfill"])
def test_a_mistyped_prefix_exits_non_zero_and_creates_nothing(
    tmp_path: Path, capsys, command: str
) -> None:
    up, wh = _upstream(tmp_path / "up"), tmp_path / "wh"
    argv = [command, "--upstream", str(up), "--warehouse", str(wh), "--prefix", "benchmarsk/"]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert f"no CSV under {up} (prefix 'benchmarsk/')" in _one_error(out.err)
    assert not wh.exists()


@pytest.mark.parametrize("command", ["ingest", "backfill"])
def test_an_empty_upstream_folder_exits_non_zero_and_creates_no_warehouse(
    tmp_path: Path, capsys, command: str
) -> None:
    up, wh = tmp_path / "up", tmp_path / "wh"
    up.mkdir()
    assert main([command, "--upstream", str(up), "--warehouse", str(wh)]) == 2
    assert f"no CSV under {up};" in _one_error(capsys.readouterr().err)
    assert not wh.exists()


def test_an_empty_s3_prefix_exits_non_zero_and_writes_nothing(
    capsys, s3_bucket: str, s3_client: Any
) -> None:
    argv = ["ingest", "--upstream", f"s3://{s3_bucket}/up", "--warehouse", f"s3://{s3_bucket}/wh"]
    assert main(argv) == 2
    assert f"no CSV under s3://{s3_bucket}/up" in _one_error(capsys.readouterr().err)
    assert s3_client.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0


def test_allow_empty_accepts_an_empty_upstream(tmp_path: Path, capsys) -> None:
    up, wh = tmp_path / "up", tmp_path / "wh"
    up.mkdir()
    argv = ["ingest", "--upstream", str(up), "--warehouse", str(wh), "--allow-empty", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["objects_seen"] == 0
