"""The queries in README.md run as written (paths aside) against a fresh warehouse."""

from __future__ import annotations

import os
import re

import duckdb
import pytest

from kindex_etl import ingest
from kindex_etl.demo import lay_out_upstream
from tests.helpers import REPO

README = (REPO / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


@pytest.fixture(scope="module")
def warehouse_cwd(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    lay_out_upstream(root / "upstream", offline=True)
    ingest(str(root / "upstream"), str(root / "warehouse"))
    old = os.getcwd()
    os.chdir(root)  # the README's queries use the relative path `warehouse/`
    yield root
    os.chdir(old)


def test_readme_has_the_queries():
    assert len(blocks("sql")) == 1 and len(blocks("python")) == 1


def test_duckdb_queries(warehouse_cwd):
    statements = [s.strip() for s in blocks("sql")[0].split(";") if s.strip()]
    assert len(statements) == 2
    con = duckdb.connect()
    compare = con.execute(statements[0]).fetchall()
    assert compare and all(r[3] is not None and r[4] is not None for r in compare)
    assert all(liger < torch for *_, liger, torch in compare)  # the generated sample says so
    docs = con.execute(statements[1]).fetchall()
    assert len(docs) == 5 and all(
        r[0].startswith(("megatron_rms_norm/", "rms_norm/")) for r in docs
    )


def test_pandas_snippet(warehouse_cwd):
    """The snippet prints per kernel and provider the median speed in microseconds: the same
    numbers DuckDB computes from the same files."""
    printed = []
    exec(blocks("python")[0], {"print": printed.append})
    [frame] = printed
    expected = duckdb.sql(
        "SELECT kernel, provider, median(value_median) / 1e3 AS us "
        "FROM read_parquet('warehouse/benchmark_runs/**/*.parquet') "
        "WHERE metric = 'speed' AND gpu_name = 'NVIDIA H100 80GB HBM3' GROUP BY ALL"
    ).fetchall()
    assert len(expected) >= 4, expected
    # A kernel has only its own baseline provider: the other cells are empty (NaN).
    got = {(k, p): v for (k, p), v in frame.stack().dropna().items()}
    assert got == pytest.approx({(k, p): us for k, p, us in expected})
