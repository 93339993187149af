"""The H200 campaign of liger-kernel 0.8.5 against 0.8.4 (tests/fixtures/h200_campaign_...):
its uploads ingest as they came back from the GPU machine, and the docs pages are what
scripts/campaign_report.py makes of them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import IngestOptions, ingest, open_warehouse
from kindex_etl.load import layout

from .conftest import FIXTURES

CAMPAIGN = FIXTURES / "h200_campaign_0.8.5_vs_0.8.4"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "h200-campaign-0.8.5-vs-0.8.4"
CAMPAIGNS = ["20261201T0950Z-h200", "20261201T1000Z-h200b"]
KERNELS = {
    "dyt", "fused_add_rms_norm", "group_norm", "kl_div", "layer_norm", "megatron_rms_norm",
    "poly_norm", "relu_squared", "rms_norm", "softmax", "tvd",
}  # fmt: skip


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    wh = str(tmp_path_factory.mktemp("campaign") / "wh")
    summary = ingest(str(CAMPAIGN / "upstream"), wh, IngestOptions(trigger=False))
    assert summary.objects_ingested == 12 and summary.quarantined_rows == 0
    assert summary.runs_written == 2048 and summary.duplicate_rows == 0
    return wh


def _report() -> Any:
    path = Path(__file__).resolve().parents[2] / "scripts" / "campaign_report.py"
    spec = importlib.util.spec_from_file_location("campaign_report", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_versions_share_one_environment_with_the_noise_facts(warehouse: str) -> None:
    wh = open_warehouse(warehouse, create=False)
    wh.refresh()
    envs = wh.read_table(layout.ENVIRONMENTS)
    assert envs is not None and envs.num_rows == 1  # two cards, two versions: one environment
    (doc,) = [json.loads(d) for d in envs.column("document").to_pylist()]
    software = doc["spec"]["software"]
    assert software["gpuPowerLimitW"] == "700.00" and software["gpuMaxClocksMHz"] == "1980/3201"
    assert software["eccMode"] == "Enabled" and software["migMode"] == "Disabled"
    assert "uuid" not in json.dumps(software).lower()
    runs = wh.read_table(layout.RUNS, ["kernel", "liger_version", "operation_mode", "metric"])
    assert runs is not None
    rows = runs.to_pylist()
    assert {r["kernel"] for r in rows} == KERNELS
    assert {r["liger_version"] for r in rows} == {"0.8.5", "0.8.4"}
    assert {(r["operation_mode"], r["metric"]) for r in rows} == {
        ("forward", "speed"), ("backward", "speed"), ("full", "speed"), ("full", "memory"),
    }  # fmt: skip
    # The card each run used is on record beside it (not in the digest).
    uuids = set()
    for run_json in (CAMPAIGN / "upstream").rglob("run.json"):
        uuids |= {s["gpu_uuid"] for s in json.loads(run_json.read_text())["scripts"]}
    assert len(uuids) == 2


def test_docs_pages_are_the_report_of_the_fixture(warehouse: str, tmp_path: Path) -> None:
    report = _report()
    runs = report.load(warehouse, CAMPAIGNS)
    pages = report.write_pages(runs, tmp_path, "0.8.5", "0.8.4")
    assert set(pages) == {f"{k}.md" for k in KERNELS} | {"index.md"}
    for name, text in pages.items():
        assert (DOCS / name).read_text(encoding="utf-8") == text, f"docs/{name} is stale"
    # GPU-bound kernels are quiet (A/A under 1 %), launch-bound ones are not.
    aa = report.aa_spread(runs[runs["metric"] == "speed"])
    by_kernel = aa.groupby("kernel")["aa_pct"].median()
    assert by_kernel["kl_div"] < 1 and by_kernel["tvd"] < 1 and by_kernel["rms_norm"] > 5
