"""The one-function hook `kindex-etl demo` calls to write the report and say where it is."""

from __future__ import annotations

from pathlib import Path

from kindex_etl.analysis.run import demo_report
from tests.analysis.helpers import build_warehouse, series_rows


def test_demo_report_writes_the_report_and_returns_its_uri(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows([0.1] * 4 + [0.2] * 4)])
    uri = demo_report(wh)
    index = Path(wh) / "reports" / "index.html"
    assert uri == index.resolve().as_uri()
    assert "changes: 1 alert;" in index.read_text()
    assert demo_report(wh) == uri  # again: nothing new to commit, same place
