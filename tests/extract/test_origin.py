"""A run's origin and upstream commit, read off its object's key as data."""

from __future__ import annotations

from pathlib import Path

import pytest

from kindex_etl.api import IngestOptions, ingest
from kindex_etl.extract.origin import SourceIdentity, identity_of
from tests.helpers import row, table, write_csv


@pytest.mark.parametrize(
    ("key", "software", "expected"),
    [
        ("benchmarks/a1b2c3d/benchmark.csv", "", SourceIdentity("ci", "a1b2c3d", None)),
        ("benchmarks/A1B2C3D-v0.6.5/benchmark.csv", "", SourceIdentity("ci", "a1b2c3d", "v0.6.5")),
        ("mirror/benchmarks/a1b2c3d/benchmark.csv", "", SourceIdentity("ci", "a1b2c3d", None)),
        ("benchmark/data/all_benchmark_data.csv", "", SourceIdentity("contributed", None, None)),
        ("reruns/0.8.5/20261130T-ab/benchmark.csv", "", SourceIdentity("rerun", None, "v0.8.5")),
        ("h200/benchmark.csv", '{"torch":"2.11"}', SourceIdentity("rerun", None, None)),
        # Not an upstream commit folder: too short, not hex, a path trick, nested deeper.
        ("benchmarks/0001/benchmark.csv", "", SourceIdentity(None, None, None)),
        ("benchmarks/zzzzzzz/benchmark.csv", "", SourceIdentity(None, None, None)),
        ("benchmarks/../a1b2c3d/benchmark.csv", "", SourceIdentity(None, None, None)),
        ("benchmarks/a1b2c3d/x/benchmark.csv", "", SourceIdentity(None, None, None)),
    ],
)
def test_identity_of_key(key: str, software: str, expected: SourceIdentity) -> None:
    assert identity_of(key, software=software) == expected


def test_a_measurement_in_the_cumulative_file_and_a_per_commit_file_is_one_ci_run(
    tmp_path: Path,
) -> None:
    # The cumulative file sorts first by key ("benchmark/" < "benchmarks/") and repeats the
    # per-commit file's row; a contributor's row is only in the cumulative file.
    ci_row = row()
    contributed = row(timestamp="2026-06-11 08:00:00", y_value_50="0.2")
    up = tmp_path / "up"
    write_csv(up / "benchmark/data/all_benchmark_data.csv", [ci_row, contributed])
    write_csv(up / "benchmarks/a1b2c3d-v0.8.0/benchmark.csv", [ci_row])
    ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    runs = table(tmp_path / "wh", "benchmark_runs").to_pylist()
    by_time = {r["observed_at"].strftime("%H"): r for r in runs}
    assert len(runs) == 2
    assert by_time["21"]["origin"] == "ci"
    assert by_time["21"]["commit_sha"] == "a1b2c3d"
    assert by_time["21"]["source_key"] == "benchmarks/a1b2c3d-v0.8.0/benchmark.csv"
    assert by_time["08"]["origin"] == "contributed"
    assert by_time["08"]["commit_sha"] is None
    # Upstream's label stays as written.
    assert {r["liger_version"] for r in runs} == {"0.8.0"}


def test_a_per_commit_row_older_than_its_commit_did_not_measure_it(tmp_path: Path) -> None:
    # Upstream's first automated folder, 53a37a5 (committed 2025-06-10 17:46 UTC, position 503
    # in the packaged history), holds a copy of the cumulative file's older rows.
    measured = row(timestamp="2025-06-10 19:00:00")
    copied = row(timestamp="2025-03-01 10:00:00")
    up = tmp_path / "up"
    write_csv(up / "benchmarks/53a37a5/benchmark.csv", [copied, measured])
    ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    runs = {r["observed_at"].month: r for r in table(tmp_path / "wh", "benchmark_runs").to_pylist()}
    assert (runs[6]["origin"], runs[6]["commit_sha"], runs[6]["commit_position"]) == (
        "ci",
        "53a37a5",
        503,
    )
    assert (runs[3]["origin"], runs[3]["commit_sha"], runs[3]["commit_position"]) == (
        "contributed",
        None,
        None,
    )


def test_per_commit_files_are_ingested_oldest_commit_first(tmp_path: Path) -> None:
    from kindex_etl.extract.discover import discover
    from kindex_etl.storage import open_store

    # Key order is not history order: 53a37a5 (position 503) comes before 2845fe8 (552).
    for key in ("benchmarks/53a37a5/benchmark.csv", "benchmarks/2845fe8/benchmark.csv",
                "benchmarks/fffffff/benchmark.csv", "benchmark/data/all_benchmark_data.csv",
                "reruns/0.8.5/r1/benchmark.csv"):  # fmt: skip
        write_csv(tmp_path / key, [row()])
    found = [c.key for c in discover(open_store(str(tmp_path)))]
    assert found == [
        "benchmarks/53a37a5/benchmark.csv",
        "benchmarks/2845fe8/benchmark.csv",
        "benchmarks/fffffff/benchmark.csv",  # not in the history: after the known ones
        "reruns/0.8.5/r1/benchmark.csv",
        "benchmark/data/all_benchmark_data.csv",
    ]
