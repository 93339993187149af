"""The queries in README.md run as written (paths aside) against a fresh warehouse."""

from __future__ import annotations

import contextlib
import io
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
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(blocks("python")[0], {})
    assert "megatron_rms_norm" in out.getvalue() and "liger" in out.getvalue()
