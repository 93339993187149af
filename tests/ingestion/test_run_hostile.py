"""A bad row never sinks the run: each hostile row or object lands held back, the clean file
beside it lands, and the counts add up for every object."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kindex_etl import IngestOptions, ingest, open_quarantine
from kindex_etl.catalog import load_catalog
from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from kindex_etl.errors import KindexError
from kindex_etl.ingestion.results import IngestSummary
from tests.helpers import SEED_LINE, row, seed_row, table, write_csv

CLEAN = "benchmarks/clean/benchmark.csv"
HOSTILE = "benchmarks/hostile/benchmark.csv"
HEADER = ",".join(UPSTREAM_COLUMNS)


def _ingest(tmp_path: Path) -> IngestSummary:
    return ingest(str(tmp_path / "up"), str(tmp_path / "wh"), IngestOptions(trigger=False))


def _clean(tmp_path: Path) -> None:
    write_csv(tmp_path / "up" / CLEAN, [seed_row(), row(kernel_provider="liger")])


def assert_counts_add_up(summary: IngestSummary) -> None:
    for r in summary.objects:
        assert r.rows == r.runs + r.duplicates + r.quarantined, r
    assert summary.rows_read == (
        summary.runs_written + summary.duplicate_rows + summary.quarantined_rows
    )
    assert sum(summary.quarantined_by_reason.values()) == summary.quarantined_rows


def assert_clean_landed(tmp_path: Path, summary: IngestSummary) -> None:
    clean = next(r for r in summary.objects if r.key == CLEAN)
    assert clean.status == "ingested" and clean.runs == 2
    runs = table(tmp_path / "wh", "benchmark_runs").to_pylist()
    assert sum(r["source_key"] == CLEAN for r in runs) == 2


ROW_CASES = {
    "config NaN": ({"extra_benchmark_config_str": '{"S": NaN, "B": 1}'}, "bad_config"),
    "config Infinity": ({"extra_benchmark_config_str": '{"S": Infinity}'}, "bad_config"),
    "config -Infinity": ({"extra_benchmark_config_str": '{"S": -Infinity}'}, "bad_config"),
    "config int beyond 2**53": (
        {"extra_benchmark_config_str": '{"S": 9007199254740993}'},
        "bad_config",
    ),
    "config nested object": ({"extra_benchmark_config_str": '{"S": {"a": 1}}'}, "bad_config"),
    "config list": ({"extra_benchmark_config_str": '{"S": [1, 2]}'}, "bad_config"),
    "config nested too deep": ({"extra_benchmark_config_str": "[" * 100000}, "bad_config"),
    "config lone surrogate": ({"extra_benchmark_config_str": '{"S": "\\ud800"}'}, "bad_config"),
    "x_value beyond 2**53": ({"x_value": "9007199254740993"}, "bad_value"),
    "liger_version with a tab": ({"liger_version": "0.8.0\t"}, "bad_version"),
    "liger_version with spaces": ({"liger_version": " 0.8.0 "}, "bad_version"),
    "liger_version not canonical": ({"liger_version": "v0.8.0"}, "bad_version"),
    "median 9e15 ms": ({"y_value_50": "9e15"}, "value_out_of_range"),
    "median 1e20 ms": ({"y_value_50": "1e20"}, "value_out_of_range"),
    "median 1e308 ms": ({"y_value_50": "1e308"}, "value_out_of_range"),
    "p80 1e308 ms": ({"y_value_80": "1e308"}, "value_out_of_range"),
    "negative time": ({"y_value_50": "-0.5"}, "value_out_of_range"),
    "negative memory": (
        {"metric_name": "memory", "metric_unit": "MB", "y_value_20": "-1"},
        "value_out_of_range",
    ),
    "memory beyond int64 bytes": (
        {"metric_name": "memory", "metric_unit": "MB", "y_value_50": "1e13"},
        "value_out_of_range",
    ),
}


@pytest.mark.parametrize("case", list(ROW_CASES))
def test_hostile_row_is_held_back_and_the_rest_lands(tmp_path, case):
    overrides, reason = ROW_CASES[case]
    _clean(tmp_path)
    # A good row in the same file, at another time so it is not a duplicate of the clean file.
    good = row(timestamp="2026-06-11 10:00:00")
    write_csv(tmp_path / "up" / HOSTILE, [good, row(**overrides)])
    summary = _ingest(tmp_path)
    assert_counts_add_up(summary)
    assert_clean_landed(tmp_path, summary)
    hostile = next(r for r in summary.objects if r.key == HOSTILE)
    assert (hostile.status, hostile.runs, hostile.quarantined) == ("ingested", 1, 1)
    assert summary.quarantined_by_reason == {reason: 1}
    held = open_quarantine(str(tmp_path / "wh")).to_pylist()
    assert [(h["reason"], h["source_key"], h["source_row"]) for h in held] == [(reason, HOSTILE, 3)]
    runs = table(tmp_path / "wh", "benchmark_runs")
    assert runs.num_rows == 3
    # Nothing wrapped around: every stored value is a non-negative int64.
    for column in ("value_median", "value_p20", "value_p80"):
        assert all(v is None or v >= 0 for v in runs.column(column).to_pylist())
    assert sorted(os.listdir(tmp_path / "wh" / "benchmark_runs")) == ["_delta_log", "release=0.8.0"]


def test_huge_values_in_range_are_exact(tmp_path):
    # 9e9 ms is 9e15 ns: within int64, so it is a run, and exactly that value.
    write_csv(tmp_path / "up" / HOSTILE, [row(y_value_50="9e9", y_value_80="9e9")])
    summary = _ingest(tmp_path)
    assert summary.runs_written == 1
    runs = table(tmp_path / "wh", "benchmark_runs").to_pylist()
    assert runs[0]["value_median"] == 9 * 10**15 and runs[0]["status"] == "passed"


def test_symlink_out_of_the_folder_is_one_rejected_object(tmp_path):
    _clean(tmp_path)
    secret = write_csv(tmp_path / "outside" / "passwd.csv", [seed_row()])
    evil = tmp_path / "up" / "benchmarks" / "evil" / "passwd.csv"
    evil.parent.mkdir(parents=True)
    evil.symlink_to(secret)
    summary = _ingest(tmp_path)
    assert_counts_add_up(summary)
    assert_clean_landed(tmp_path, summary)
    bad = next(r for r in summary.objects if r.key == "benchmarks/evil/passwd.csv")
    assert bad.status == "rejected" and "unsafe object key" in bad.detail
    assert summary.quarantined_by_reason == {"unsafe_key": 1}
    # The next run skips it (same version) and completes too.
    again = _ingest(tmp_path)
    assert again.objects_skipped == 2 and again.commits == []


@pytest.mark.parametrize("name", ["back\\slash.csv", "ctrl\x01.csv", "tab\tname.csv", "nl\n.csv"])
def test_hostile_local_file_names_are_one_rejected_object(tmp_path, name):
    _clean(tmp_path)
    write_csv(tmp_path / "up" / "benchmarks" / name, [seed_row()])
    summary = _ingest(tmp_path)
    assert_counts_add_up(summary)
    assert_clean_landed(tmp_path, summary)
    bad = next(r for r in summary.objects if r.key == f"benchmarks/{name}")
    assert bad.status == "rejected"
    assert summary.quarantined_by_reason == {"unsafe_key": 1}
    assert _ingest(tmp_path).commits == []  # and it never stops a later run


FILE_CASES = {
    "one huge line": (b"x" * (2 << 20), "bad_header", 1),
    "utf-16": (f"{HEADER}\n{SEED_LINE}\n".encode("utf-16"), "bad_encoding", None),
    "gzip": (gzip.compress(f"{HEADER}\n{SEED_LINE}\n".encode()), "compressed_file", None),
    "duplicated column": (
        f"{HEADER},x_value\n{SEED_LINE},1\n".encode(),
        "bad_header",
        2,
    ),
    "empty": (b"", "empty_file", 1),
}


@pytest.mark.parametrize("case", list(FILE_CASES))
def test_bad_file_has_its_reason_and_counts_its_lines(tmp_path, case):
    data, reason, lines = FILE_CASES[case]
    _clean(tmp_path)
    (tmp_path / "up" / HOSTILE).parent.mkdir(parents=True)
    (tmp_path / "up" / HOSTILE).write_bytes(data)
    summary = _ingest(tmp_path)
    assert_counts_add_up(summary)
    assert_clean_landed(tmp_path, summary)
    bad = next(r for r in summary.objects if r.key == HOSTILE)
    assert bad.status == "rejected"
    assert list(summary.quarantined_by_reason) == [reason]
    if lines is not None:
        assert bad.rows == bad.quarantined == lines


def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """CSV blocks of 4 KiB (about 25 rows): a few hundred rows make many batches."""
    import kindex_etl.ingestion.run as run_module

    real = run_module.read_batches
    monkeypatch.setattr(
        run_module, "read_batches", lambda store, key: real(store, key, block_size=4096)
    )


def test_object_bad_after_its_first_blocks_is_rejected_whole(tmp_path, monkeypatch):
    _small_blocks(monkeypatch)
    _clean(tmp_path)
    rows = [row(timestamp=f"2026-06-11 10:{i // 60:02d}:{i % 60:02d}") for i in range(200)]
    path = write_csv(tmp_path / "up" / HOSTILE, rows)
    with path.open("ab") as fh:
        fh.write(SEED_LINE.encode().replace(b"H100", b"H\xff00") + b"\n")
    summary = _ingest(tmp_path)
    assert_counts_add_up(summary)
    assert_clean_landed(tmp_path, summary)
    bad = next(r for r in summary.objects if r.key == HOSTILE)
    assert (bad.status, bad.rows, bad.quarantined, bad.runs) == ("rejected", 202, 202, 0)
    assert summary.quarantined_by_reason == {"bad_encoding": 202}
    runs = table(tmp_path / "wh", "benchmark_runs").to_pylist()
    assert {r["source_key"] for r in runs} == {CLEAN}  # nothing of the rejected object


def test_held_back_rows_of_many_blocks_land_in_few_row_groups(tmp_path, monkeypatch):
    # Held-back rows arrive a few per CSV block; each block once made a row group of its own
    # (991 of ~2,500 rows at 20M realistic rows), which readers and the writer's footer pay.
    _small_blocks(monkeypatch)
    _clean(tmp_path)
    rows = [
        row(gpu_name="NVIDIA Z9 Imaginary", timestamp=f"2026-06-11 10:{i // 60:02d}:{i % 60:02d}")
        for i in range(300)
    ]
    write_csv(tmp_path / "up" / HOSTILE, rows)
    summary = _ingest(tmp_path)
    assert_counts_add_up(summary)
    assert summary.quarantined_rows == 300
    files = list((tmp_path / "wh" / "quarantine" / "rows").glob("*.parquet"))
    assert len(files) == 1
    assert pq.ParquetFile(files[0]).metadata.num_row_groups == 1
    held = open_quarantine(str(tmp_path / "wh")).to_pylist()
    assert [h["source_row"] for h in held] == list(range(2, 302))


def test_source_row_counts_blank_lines_and_quoted_newlines(tmp_path):
    bad = SEED_LINE.replace("NVIDIA H100 80GB HBM3", "NVIDIA H1000 Imaginary")
    two_lines = bad.replace('"{""S"": 4096, ""B"": 1}"', '"{""S"": 4096,\n ""B"": 1}"')
    path = tmp_path / "up" / HOSTILE
    path.parent.mkdir(parents=True)
    path.write_text("\n".join([HEADER, SEED_LINE, "", two_lines, bad]) + "\n")
    summary = _ingest(tmp_path)
    assert_counts_add_up(summary)
    held = open_quarantine(str(tmp_path / "wh")).to_pylist()
    assert sorted(h["source_row"] for h in held) == [4, 6]
    runs = table(tmp_path / "wh", "benchmark_runs").to_pylist()
    assert [r["source_row"] for r in runs] == [2]


def test_a_catalog_dir_that_does_not_exist_is_an_error(tmp_path, capsys):
    with pytest.raises(KindexError, match="does not exist"):
        load_catalog(tmp_path / "nope")
    from kindex_etl.cli import main

    write_csv(tmp_path / "up" / CLEAN, [seed_row(), row(gpu_name="NVIDIA Z9 Imaginary")])
    _ingest(tmp_path)
    args = ["replay", "--warehouse", str(tmp_path / "wh"), "--catalog-dir", str(tmp_path / "nope")]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err


@pytest.mark.slow
def test_the_cli_exits_0_with_every_hostile_input_at_once(tmp_path):
    import json
    import subprocess
    import sys

    from tests.helpers import REPO

    _clean(tmp_path)
    up = tmp_path / "up"
    write_csv(up / HOSTILE, [row(**overrides) for overrides, _ in ROW_CASES.values()])
    for i, (data, _, _) in enumerate(FILE_CASES.values()):
        (up / "files" / f"{i}.csv").parent.mkdir(parents=True, exist_ok=True)
        (up / "files" / f"{i}.csv").write_bytes(data)
    write_csv(up / "back\\slash.csv", [seed_row()])
    secret = write_csv(tmp_path / "outside" / "passwd.csv", [seed_row()])
    (up / "evil").mkdir()
    (up / "evil" / "passwd.csv").symlink_to(secret)
    home = tmp_path / "prefect-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_"))}
    env.update(
        PREFECT_HOME=str(home),
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PYTHONPATH=str(REPO),
    )
    args = ["ingest", "--upstream", str(up), "--warehouse", str(tmp_path / "wh")]
    done = subprocess.run(
        [sys.executable, "-m", "kindex_etl.cli", *args, "--json", "--no-trigger"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    summary = json.loads(done.stdout)
    assert summary["rows_read"] == (
        summary["runs_written"] + summary["duplicate_rows"] + summary["quarantined_rows"]
    )
    assert summary["objects_rejected"] == len(FILE_CASES) + 2
    assert summary["runs_written"] == 2  # the clean file; every hostile row is held back
    expected = {reason for _, reason in ROW_CASES.values()}
    expected |= {reason for _, reason, _ in FILE_CASES.values()} | {"unsafe_key"}
    assert set(summary["quarantined_by_reason"]) == expected
