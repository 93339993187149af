"""`kindex-etl reprocess` on the warehouse main built at 5ae26c4, as an operator runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kindex_etl.cli import main
from tests.helpers import FIXTURES, REPO

FIXTURE = FIXTURES / "warehouse-main-5ae26c4" / "warehouse"


def _catalog_placing_the_held_gpu(tmp_path: Path) -> Path:
    """The packaged GPU catalog plus the one GPU the fixture holds back (`NVIDIA RTX 6000`)."""
    gpus = json.loads((REPO / "kindex_etl" / "catalog" / "gpus.json").read_text())
    gpus["gpus"].append(
        {"match": "NVIDIA RTX 6000", "vendor": "nvidia", "product": "NVIDIA RTX 6000",
         "architecture": "sm_75", "family": "Turing", "segment": "workstation"}
    )  # fmt: skip
    out = tmp_path / "catalog"
    out.mkdir()
    (out / "gpus.json").write_text(json.dumps(gpus))
    return out


def test_reprocess_that_releases_every_held_row(tmp_path: Path, capsys) -> None:
    """Issue 32: with nothing left held back, the empty quarantine was read with the runs
    schema and the command failed with KeyError: 'Column reason does not exist in schema'."""
    wh = tmp_path / "wh"
    shutil.copytree(FIXTURE, wh, ignore=shutil.ignore_patterns("*.kindex-lock"))
    catalog = _catalog_placing_the_held_gpu(tmp_path)
    args = ["reprocess", "--warehouse", str(wh), "--catalog-dir", str(catalog), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["runs_before"], out["held_before"]) == (41, 11)
    assert (out["runs_after"], out["held_after"], out["released"]) == (52, 0, 11)
    assert out["commit"] == 2
    assert main(["quarantine", "--warehouse", str(wh), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == []
    assert main(args) == 0  # and again: nothing moves, nothing is committed
    assert json.loads(capsys.readouterr().out)["commit"] is None


def test_reprocess_keeps_what_the_analyses_recorded(tmp_path: Path, capsys) -> None:
    """Found by the month as deployed (issue 32): a reprocess retired every live file, the
    regressions table's too, so the next analysis announced every known alert as new again."""
    from kindex_etl.analysis.run import run_regressions
    from tests.analysis.helpers import build_warehouse, series_rows

    wh = build_warehouse(tmp_path, [series_rows([0.1] * 4 + [0.13] * 4)])
    assert len(run_regressions(wh, report=False).new_alerts) == 1
    catalog = _catalog_placing_the_held_gpu(tmp_path)  # a new catalog version: all re-stamped
    assert main(["reprocess", "--warehouse", wh, "--catalog-dir", str(catalog), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["commit"] is not None
    again = run_regressions(wh, report=False)
    assert len(again.alerts) == 1 and again.new_alerts == [] and again.commit is None
