"""What a re-run uploads becomes documents whose ExecutionEnvironment records the software.

Two sources: the STAND-IN harness's upload (CPU), and the real H200 re-run of liger-kernel 0.8.5
kept in tests/fixtures/h200_rerun_0.8.5/.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import IngestOptions, ingest, open_warehouse
from kindex_etl.gpu import run_campaign
from kindex_etl.load import layout
from tests.helpers import write_csv

from .conftest import FIXTURES, STANDIN_VERSION

H200_FIXTURE = FIXTURES / "h200_rerun_0.8.5"
REPO = Path(__file__).resolve().parents[2]


def _environments(warehouse: Path) -> list[dict[str, Any]]:
    wh = open_warehouse(str(warehouse))
    wh.refresh()
    table = wh.read_table(layout.ENVIRONMENTS)
    assert table is not None
    return [json.loads(d) | {"digest": g} for d, g in zip(
        table.column("document").to_pylist(), table.column("digest").to_pylist()
    )]  # fmt: skip


def _runs(warehouse: Path, columns: list[str]) -> list[dict[str, Any]]:
    wh = open_warehouse(str(warehouse))
    wh.refresh()
    table = wh.read_table(layout.RUNS, columns)
    assert table is not None
    return table.to_pylist()


def _upstream_copy(rows: list[dict[str, str]], **changes: str) -> list[dict[str, str]]:
    return [{**r, **changes} for r in rows]


def test_standin_upload_ingests_with_its_own_environment(
    standin_sdist: Path, standin_gpus: Callable[[int], None], tmp_path: Path
) -> None:
    standin_gpus(1)
    upstream = tmp_path / "upstream"
    result = run_campaign(
        STANDIN_VERSION,
        kernels=["megatron_rms_norm", "rms_norm"],
        repeats=1,
        sdist=standin_sdist,
        workdir=tmp_path / "work",
        upstream=str(upstream),
    )
    (run,) = result.runs
    ours = list(csv.DictReader((Path(run.output_dir) / "benchmark.csv").open()))
    # Upstream measured the same GPU model (same name), recording no software.
    theirs_rows = _upstream_copy(ours[:4], liger_version="0.8.0", timestamp="2026-06-10 21:03:42")
    write_csv(upstream / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", theirs_rows)

    summary = ingest(str(upstream), str(tmp_path / "wh"), IngestOptions())
    assert summary.quarantined_rows == 0 and summary.runs_written == 36
    assert summary.reruns_triggered == []  # first load of an empty warehouse

    envs = {e["digest"]: e for e in _environments(tmp_path / "wh")}
    assert len(envs) == 2
    by_software = {bool(e["spec"]["software"]): e for e in envs.values()}
    theirs, mine = by_software[False], by_software[True]
    assert theirs["metadata"]["name"] == mine["metadata"]["name"] == "liger-bench-nvidia-h200"
    assert theirs["spec"]["hardware"] == mine["spec"]["hardware"]
    assert theirs["digest"] != mine["digest"]
    assert mine["spec"]["software"] == result.environment["software"]

    runs = _runs(tmp_path / "wh", ["liger_version", "environment_digest", "source_key"])
    for r in runs:
        expected = mine if r["source_key"].startswith("reruns/") else theirs
        assert r["environment_digest"] == expected["digest"]
        assert r["liger_version"] == (STANDIN_VERSION if expected is mine else "0.8.0")


def _lay_out_h200_fixture(upstream: Path) -> None:
    base = upstream / "reruns" / "0.8.5"
    shutil.copytree(H200_FIXTURE, base / "20261130T123054Z-6bc66855",
                    ignore=shutil.ignore_patterns("repeat", "upstream-*", "README.md"))  # fmt: skip
    shutil.copytree(H200_FIXTURE / "repeat", base / "20261130T123145Z-6c800a3e")
    data = upstream / "benchmark" / "data"
    data.mkdir(parents=True)
    shutil.copy(H200_FIXTURE / "upstream-h100-0.8.0-megatron_rms_norm.csv",
                data / "all_benchmark_data.csv")  # fmt: skip


@pytest.fixture
def h200_warehouse(tmp_path: Path) -> Path:
    upstream = tmp_path / "upstream"
    _lay_out_h200_fixture(upstream)
    summary = ingest(str(upstream), str(tmp_path / "wh"), IngestOptions())
    assert summary.objects_ingested == 3 and summary.quarantined_rows == 0
    assert summary.runs_written == 72 + 72 + 60
    return tmp_path / "wh"


def test_h200_rerun_fixture_becomes_documents(h200_warehouse: Path) -> None:
    envs = _environments(h200_warehouse)
    (h200,) = [e for e in envs if e["spec"]["software"]]
    assert h200["kind"] == "ExecutionEnvironment"
    assert h200["metadata"]["name"] == "liger-bench-nvidia-h200"
    assert h200["spec"]["hardware"]["product"] == "NVIDIA H200"
    assert h200["spec"]["hardware"]["architecture"] == "sm_90"  # placed by the catalog
    assert h200["spec"]["software"] == {
        "cuda": "13.0",
        "driver": "580.159.04",
        "hostCpu": "Intel(R) Xeon(R) Processor",
        "python": "3.12.3",
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
    }
    (h100,) = [e for e in envs if not e["spec"]["software"]]
    assert h100["spec"]["hardware"]["product"] != "NVIDIA H200"

    runs = _runs(h200_warehouse, [
        "kernel", "operation_mode", "provider", "metric", "status", "gpu_name", "liger_version",
        "environment_digest", "source_key", "value_unit",
    ])  # fmt: skip
    ours = [r for r in runs if r["environment_digest"] == h200["digest"]]
    assert len(ours) == 144 and all(r["status"] == "passed" for r in ours)
    assert {r["gpu_name"] for r in ours} == {"NVIDIA H200"}
    assert {r["liger_version"] for r in ours} == {"0.8.5"}
    seen = {(r["kernel"], r["metric"], r["operation_mode"], r["provider"]) for r in ours}
    for mode in ("forward", "backward", "full"):
        assert ("megatron_rms_norm", "speed", mode, "liger") in seen
        assert ("megatron_rms_norm", "speed", mode, "torch") in seen
        assert ("rms_norm", "speed", mode, "liger") in seen
        assert ("rms_norm", "speed", mode, "huggingface") in seen
    assert ("megatron_rms_norm", "memory", "full", "liger") in seen
    assert ("rms_norm", "memory", "full", "huggingface") in seen
    assert not any(r["provider"] == "megatron" for r in ours)  # no megatron-core on that host


def _compare_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "compare_rerun", REPO / "scripts" / "compare_rerun.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_script_sets_h200_beside_h100(
    h200_warehouse: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compare = _compare_module()
    runs, software = compare.load(str(h200_warehouse))
    table = compare.compare(
        runs, software, kernels=["megatron_rms_norm"], gpu="NVIDIA H200", version="0.8.5",
        base_gpu="NVIDIA H100 80GB HBM3", base_version="0.8.0", noisy_pct=10.0,
    )  # fmt: skip
    assert len(table) == 40 and table["value_median_base"].notna().all()
    row = table[(table.provider == "torch") & (table.operation_mode == "forward")
                & (table.metric == "speed") & (table.x_value == "16384")].iloc[0]  # fmt: skip
    assert 0.6 < row.ratio < 0.9 and not row.noisy  # GPU-bound: the H200 is faster
    mem = table[table.metric == "memory"]
    assert (mem.ratio.round(6) == 1.0).all()  # memory matches upstream exactly
    assert table[(table.provider == "liger") & (table.metric == "speed")].noisy.all()

    assert compare.main(["--warehouse", str(h200_warehouse), "--kernel", "megatron_rms_norm"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| kernel | pass | provider |") and out.count("\n") == 42
