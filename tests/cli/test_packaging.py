"""What the package installs covers what its commands tell people to run."""

from __future__ import annotations

import tomllib

from tests.helpers import REPO


def test_the_duckdb_query_the_demo_prints_runs_with_what_the_package_installs() -> None:
    """Issue 32: the demo printed a DuckDB query to copy; DuckDB came only with [test]."""
    demo = (REPO / "kindex_etl" / "demo.py").read_text()
    assert "the same with DuckDB over the Delta table (copy it into Python)" in demo
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "duckdb" for d in project["dependencies"])
