"""The queries in README.md run as written (paths aside) against a fresh warehouse."""

from __future__ import annotations

import csv
import os

import duckdb
import pytest
from deltalake import DeltaTable

from kindex_etl import ingest
from kindex_etl.demo import lay_out_upstream
from kindex_etl.maintenance import compact
from tests.docs_blocks import REPO, blocks, runnable

README = REPO / "README.md"


@pytest.fixture(scope="module")
def warehouse_cwd(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    lay_out_upstream(root / "kindex-demo" / "upstream", offline=True)
    ingest(str(root / "kindex-demo" / "upstream"), str(root / "kindex-demo" / "warehouse"))
    old = os.getcwd()
    os.chdir(root)  # the README's queries use the demo's relative path `kindex-demo/warehouse/`
    yield root / "kindex-demo"
    os.chdir(old)


def test_readme_has_the_queries():
    python = [b for b in blocks(README) if b.lang == "python"]
    assert len(python) == 2 and all(b.runnable for b in python)
    assert not any("read_parquet(" in b.text for b in python)  # no bare glob
    # deltalake's to_pyarrow_table() (and to_pandas(), which calls it) can abort the
    # interpreter at exit (docs/reading.md): the README shows the clean paths only.
    assert not any("to_pyarrow_table(" in b.text or ".to_pandas(filters" in b.text for b in python)


def _run(block: str) -> list[object]:
    printed: list[object] = []
    exec(block, {"print": printed.append})
    return printed


def test_duckdb_query_stays_exact_through_compaction(warehouse_cwd):
    [compare] = _run(runnable(README, "python")[0])
    assert compare and all(r[3] is not None and r[4] is not None for r in compare)
    # The swept value sorts as a number (as text, 16384 would come before 2048).
    for kernel, gpu in {(r[0], r[1]) for r in compare}:
        xs = [r[2] for r in compare if (r[0], r[1]) == (kernel, gpu)]
        assert all(isinstance(x, float) for x in xs) and xs == sorted(xs), xs
    assert all(liger < torch for *_, liger, torch in compare)  # the generated sample says so
    # The same measurements again a year earlier (new runs, same values: same medians) in
    # another object, then the daily compaction: files are rewritten, the answer is not.
    cumulative = next((warehouse_cwd / "upstream").rglob("all_benchmark_data.csv"))
    with cumulative.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["timestamp"] = r["timestamp"].replace("2026-", "2025-", 1)
    again = warehouse_cwd / "upstream" / "again" / "all_benchmark_data.csv"
    again.parent.mkdir(exist_ok=True)
    with again.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    ingest(str(warehouse_cwd / "upstream"), str(warehouse_cwd / "warehouse"))
    assert compact(str(warehouse_cwd / "warehouse")).commit is not None
    assert _run(runnable(README, "python")[0]) == [compare]


def test_pandas_snippet(warehouse_cwd):
    """The snippet prints per kernel and provider the median speed in microseconds: the same
    numbers DuckDB computes from the same files."""
    printed = []
    exec(runnable(README, "python")[1], {"print": printed.append})
    [frame] = printed
    delta_runs = DeltaTable("kindex-demo/warehouse/benchmark_runs").to_pyarrow_dataset()  # noqa: F841
    expected = duckdb.sql(
        "SELECT kernel, provider, median(value_median) / 1e3 AS us "
        "FROM delta_runs "
        "WHERE metric = 'speed' AND gpu_name = 'NVIDIA H100 80GB HBM3' GROUP BY ALL"
    ).fetchall()
    assert len(expected) >= 4, expected
    # A kernel has only its own baseline provider: the other cells are empty (NaN).
    got = {(k, p): v for (k, p), v in frame.stack().dropna().items()}
    assert got == pytest.approx({(k, p): us for k, p, us in expected})
