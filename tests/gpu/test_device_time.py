"""The device-time protocol on CPU: its documents and digests, the launcher over the STAND-IN
device (tests/gpu/standin_device: a torch whose kernels advance a simulated device clock, and
triton's do_bench reading a launch-bound host), a campaign with --device-time, and the
separation of its series from upstream-timer series."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.contracts import device_protocol
from kindex_etl.contracts.digests import digest as contract_digest
from kindex_etl.contracts.documents import BenchmarkProtocol
from kindex_etl.contracts.upstream import GPU_STATE_COLUMNS
from kindex_etl.gpu import device_ab, device_time, run_campaign
from kindex_etl.normalize.descriptors import protocol_document

from .conftest import (
    BASELINE_VERSION,
    STANDIN_DEVICE,
    STANDIN_DEVICE_SDIST,
    STANDIN_ROOT,
    STANDIN_VERSION,
    build_standin_sdist,
)

MODES = ("forward", "backward", "full")
METHODS = ("cuda_graph", "cupti")


def test_protocol_documents_are_benchmark_protocols_of_their_own_family() -> None:
    digests = set()
    for method in METHODS:
        for mode in MODES:
            doc = device_time.protocol_document(method, mode)
            BenchmarkProtocol.model_validate(doc)  # the contract upstream's protocols meet
            # The stdlib digest a bare GPU host computes is the contract's RFC 8785 one.
            assert device_time.digest(doc) == contract_digest(doc)
            assert doc["spec"]["comparability"]["family"] == "kindex_device_time"
            digests.add(device_time.digest(doc))
    assert len(digests) == len(METHODS) * len(MODES)
    upstream = {contract_digest(protocol_document("speed", m).document()) for m in MODES}
    assert not digests & upstream
    notes = device_time.protocol_document("cuda_graph", "full")["spec"]["comparability"]["notes"]
    assert "20 batches" in notes and "3 warm-up calls" in notes and "the forward pass plus" in notes


def test_the_digest_moves_with_what_is_timed_and_how_many_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = device_time.digest(device_time.protocol_document("cuda_graph", "forward"))
    cupti = device_time.digest(device_time.protocol_document("cupti", "backward"))
    spec = json.loads(json.dumps(device_time.spec()))
    spec["parameters"]["batches"] = 40
    # Where the documents are made (contracts.device_protocol) and what the launcher reads.
    monkeypatch.setattr(device_protocol, "spec", lambda: spec)
    monkeypatch.setattr(device_time, "spec", lambda: spec)
    after = device_time.protocol_document("cuda_graph", "forward")
    assert device_time.digest(after) != before
    assert "40 batches" in after["spec"]["comparability"]["notes"]
    # The CUPTI protocol does not use batches: its digest stays.
    assert device_time.digest(device_time.protocol_document("cupti", "backward")) == cupti
    assert device_time.launcher_parameters()["batches"] == 40


def test_host_bound_is_upstream_over_device_at_the_factor() -> None:
    assert device_time.spec()["hostBoundFactor"] == 2
    assert device_time.host_bound(0.1245, 0.0188) == (6.6223, True)
    assert device_time.host_bound(0.5, 0.48) == (1.0417, False)
    assert device_time.host_bound(None, 0.1) == (None, False)
    assert device_time.method_for("backward") == "cupti"
    assert device_time.method_for("full") == device_time.method_for("other") == "cuda_graph"


def _metadata(dest: Path, version: str) -> Path:
    info = dest / f"liger_kernel-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: liger-kernel\nVersion: {version}\n"
    )
    return dest


def _launch(tmp_path: Path, env_extra: dict[str, str] | None = None) -> tuple[list[Any], Path]:
    work = tmp_path / "bench"
    shutil.copytree(STANDIN_DEVICE_SDIST / STANDIN_ROOT / "benchmark", work)
    out = tmp_path / "device.jsonl"
    env = device_time.child_env(dict(os.environ), out)
    meta = _metadata(tmp_path / "meta", STANDIN_VERSION)
    env["PYTHONPATH"] = os.pathsep.join([str(STANDIN_DEVICE), str(meta)])
    env.update(env_extra or {})
    proc = subprocess.run(
        device_time.command(sys.executable, "benchmark_rms_norm.py", ["--overwrite"]),
        cwd=work / "scripts", env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return records, work / "data" / "all_benchmark_data.csv"


def test_launcher_keeps_upstreams_timer_and_times_each_point_by_device_time(
    tmp_path: Path,
) -> None:
    records, csv_path = _launch(tmp_path)
    rows = list(csv.DictReader(csv_path.open()))
    assert len(records) == len(rows) == 18  # 3 providers x 3 passes x 2 shapes
    by_point = {(r["point"]["kernel_provider"], r["point"]["kernel_operation_mode"],
                 r["point"]["x_value"]): r for r in records}  # fmt: skip
    for row in rows:
        rec = by_point[(row["kernel_provider"], row["kernel_operation_mode"], row["x_value"])]
        # The point is the CSV row's, and the CSV holds upstream's timer, untouched.
        assert rec["point"]["extra_benchmark_config_str"] == row["extra_benchmark_config_str"]
        assert rec["point"]["kernel_name"] == "rms_norm" and rec["point"]["x_name"] == "T"
        assert float(row["y_value_50"]) == pytest.approx(rec["upstream"]["p50_ms"])
    # Device time is exactly the simulated kernels: 5 us per 1024 of x for liger.
    fwd, bwd, full = (by_point[("liger", m, "8192")]["device"] for m in MODES)
    assert fwd["method"] == "cuda_graph" and fwd["p50_ms"] == pytest.approx(0.040)
    assert fwd["batches"] == 20 and fwd["replaysPerBatch"] == 20
    assert bwd["method"] == "cupti" and bwd["p50_ms"] == pytest.approx(0.060)
    assert bwd["kernelsPerCall"] == 2 and bwd["calls"] == 20
    assert full["method"] == "cuda_graph" and full["p50_ms"] == pytest.approx(0.100)
    # A callable that syncs with the host cannot be captured: CUPTI, with the reason kept.
    hostile = by_point[("hostile", "full", "1024")]["device"]
    assert hostile["method"] == "cupti" and "CUDA graph capture" in hostile["captureError"]
    assert hostile["p50_ms"] == pytest.approx(0.050)
    # Host-bound: upstream's timer read 100 us of host for 5 us of liger's device work.
    points = {(p["point"]["kernel_provider"], p["point"]["kernel_operation_mode"],
               p["point"]["x_value"]): p
              for p in device_time.collect(json.dumps(r) for r in records)["points"]}  # fmt: skip
    assert points[("liger", "forward", "1024")]["hostBound"] is True
    assert points[("liger", "forward", "1024")]["upstreamOverDevice"] == pytest.approx(20.0)
    assert points[("torch", "forward", "8192")]["hostBound"] is False
    assert points[("liger", "backward", "8192")]["protocolDigest"] == device_time.digest(
        device_time.protocol_document("cupti", "backward")
    )


def test_every_point_records_the_gpus_state_and_a_throttled_one_is_marked(
    tmp_path: Path,
) -> None:
    # The STAND-IN pynvml reports SM clock 1,500 MHz and SW power cap (0x4) set (issue 53).
    records, _ = _launch(tmp_path, {"STANDIN_SM_CLOCK": "1500", "STANDIN_THROTTLE": "0x4"})
    for rec in records:
        device = rec["device"]
        assert device["throttled"] is True
        for moment in ("before", "busy", "after"):
            state = device["gpu"][moment]
            assert state["smClockMHz"] == 1500 and state["powerW"] == 500.0
            assert state["throttleNames"] == ["sw_power_cap"]
    calm, _ = _launch(tmp_path / "calm", {"STANDIN_THROTTLE": "0x1"})  # idle: no slowdown
    assert not any(r["device"]["throttled"] for r in calm)


def test_the_csv_carries_each_points_gpu_state_as_the_runs_columns_read_it() -> None:
    """device_time.csv's GPU_STATE_COLUMNS (issue 53): clocks, power and temperature of the
    `busy` reading, the reasons of all three readings OR-ed, the launcher's own mark."""

    def state(sm: int, reasons: int | None) -> dict[str, Any]:
        return {"smClockMHz": sm, "memClockMHz": 2619, "powerW": 612.4, "temperatureC": 61,
                "throttleReasons": reasons}  # fmt: skip

    device = {
        "gpu": {"before": state(1980, 0x1), "busy": state(1530, 0x4), "after": state(1755, None)},
        "throttled": True,
    }
    assert device_time.gpu_columns(device) == {
        "gpu_sm_clock_mhz": "1530", "gpu_mem_clock_mhz": "2619", "gpu_power_w": "612.4",
        "gpu_temperature_c": "61", "gpu_throttle_reasons": "5", "gpu_throttled": "true",
    }  # fmt: skip
    # Idle only: not marked. No NVML (no `gpu`): every column empty.
    calm = {"gpu": {m: state(1980, 0x1) for m in ("before", "busy", "after")}, "throttled": False}
    assert device_time.gpu_columns(calm)["gpu_throttled"] == "false"
    assert device_time.gpu_columns(calm)["gpu_throttle_reasons"] == "1"
    assert set(device_time.gpu_columns({"method": "cupti"}).values()) == {""}
    # A row of the CSV: upstream's columns, the upstream figure, then the state.
    point = {"kernel_name": "rms_norm", "kernel_provider": "liger", "metric_name": "speed",
             "kernel_operation_mode": "forward", "x_name": "T", "x_value": "1024",
             "extra_benchmark_config_str": "{}"}  # fmt: skip
    row = {**point, "y_value_50": "0.5", "gpu_name": "NVIDIA H100 80GB HBM3"}
    record = device_time.point_record(
        {"point": point, "upstream": {"p50_ms": 0.5},
         "device": {"method": "cuda_graph", "p50_ms": 0.4, "p20_ms": 0.39, "p80_ms": 0.41,
                    **device}}
    )  # fmt: skip
    rows = device_time.csv_rows([row], {"points": [record], "protocolVersion": 1})
    text = device_time.to_csv(rows).decode()
    header, line = text.splitlines()
    assert header.split(",")[-7:] == ["upstream_y_value_50", *GPU_STATE_COLUMNS]
    assert line.split(",")[-7:] == ["0.5", "1530", "2619", "612.4", "61", "5", "true"]


def test_a_device_time_campaign_finds_a_3_percent_slowdown_that_upstreams_timer_misses(
    tmp_path: Path, standin_device: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    standin_device()
    monkeypatch.setenv("STANDIN_SLOW_VERSION", STANDIN_VERSION)  # the candidate's liger: +3 %
    sdists = tmp_path / "dist"
    result = run_campaign(
        STANDIN_VERSION, baseline=BASELINE_VERSION, kernels=["rms_norm"], repeats=3,
        sdist=build_standin_sdist(sdists, STANDIN_VERSION, STANDIN_DEVICE_SDIST),
        baseline_sdist=build_standin_sdist(sdists, BASELINE_VERSION, STANDIN_DEVICE_SDIST),
        workdir=tmp_path / "work", upstream=str(tmp_path / "upstream"), device_time=True,
        campaign_id="20260101T000000Z-dev",
    )  # fmt: skip
    assert result.ok and len(result.runs) == 6
    for run in result.runs:
        folder = Path(run.output_dir)
        assert not (folder / "device-parts").exists()
        data = json.loads((folder / device_time.RESULT_FILE).read_text())
        assert len(data["points"]) == 18 and data["failedPoints"] == 0
        assert data["family"] == "kindex_device_time" and data["hostBoundPoints"] > 0
        entry = json.loads((folder / "run.json").read_text())["deviceTime"]
        assert entry["points"] == 18 and entry["protocols"] == sorted(data["protocols"])
        uploaded = tmp_path / "upstream" / "reruns" / run.version / run.run_id
        assert (uploaded / device_time.RESULT_FILE).read_bytes() == (
            folder / device_time.RESULT_FILE
        ).read_bytes()
        # The CSV is upstream's protocol still: metric speed, as upstream's timer read it.
        assert {r["metric_name"] for r in csv.DictReader((folder / "benchmark.csv").open())} == {
            "speed"
        }

    series = device_ab.load([Path(result.output_dir)])
    device_ab.check_separation(series)
    device = device_ab.by_timer(series, "device")
    upstream = device_ab.by_timer(series, "upstream")
    assert len(device) == len(upstream) == 18
    # The simulated device repeats itself exactly: A/A is 0 and no A/A check alerts.
    assert device_ab.aa_summary(device)["median"] == 0
    model = device_ab.fit_noise(device)
    assert not any(c.alert for c in device_ab.aa_checks(device, model))
    found = {(c.series.provider, c.series.mode, c.series.x): c for c in device_ab.ab(device, model)}
    for mode in MODES:
        for x in ("1024", "8192"):
            liger = found[("liger", mode, x)]
            assert liger.alert and liger.ratio == pytest.approx(1.03)
            assert liger.low <= 1.03 <= liger.high and liger.low > 1
            assert not found[("torch", mode, x)].alert
    # Upstream's timer read the host (100 us) at liger's small points: no change to see.
    up_model = device_ab.fit_noise(upstream)
    up = {(c.series.provider, c.series.mode, c.series.x): c
          for c in device_ab.ab(upstream, up_model)}  # fmt: skip
    assert up[("liger", "forward", "1024")].ratio == pytest.approx(1.0)
    assert not up[("liger", "forward", "1024")].alert


def test_series_of_the_two_timers_never_share_a_key_or_a_protocol() -> None:
    point = ("rms_norm", "liger", "forward", "1024", "{}", 0)
    upstream_digest = device_ab.upstream_protocol("forward")
    graph = device_time.digest(device_time.protocol_document("cuda_graph", "forward"))
    dev = device_ab.Series("device", graph, *point, method="cuda_graph")
    up = device_ab.Series("upstream", upstream_digest, *point, method="do_bench")
    assert dev.key != up.key
    device_ab.check_separation([dev, up])
    forged = device_ab.Series("device", upstream_digest, *point, method="cuda_graph")
    with pytest.raises(ValueError, match="both timers"):
        device_ab.check_separation([forged, up])


def test_the_slow_build_is_the_release_with_a_spin_kernel_after_rmsnorms_forward(
    tmp_path: Path,
) -> None:
    import importlib.util
    import zipfile

    path = Path(__file__).resolve().parents[2] / "scripts" / "build_slow_wheel.py"
    spec = importlib.util.spec_from_file_location("build_slow_wheel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    wheel = tmp_path / "liger_kernel-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("liger_kernel/transformers/rms_norm.py", "class LigerRMSNorm:\n    pass\n")
        z.writestr("liger_kernel-9.9.9.dist-info/METADATA", "Name: liger-kernel\nVersion: 9.9.9\n")
        z.writestr("liger_kernel-9.9.9.dist-info/RECORD", "stale\n")
    out = module.build(wheel, tmp_path / "out")
    assert out.name == "liger_kernel-9.9.9+kindex.slow-py3-none-any.whl"
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        source = z.read("liger_kernel/transformers/rms_norm.py").decode()
        meta = z.read("liger_kernel-9.9.9+kindex.slow.dist-info/METADATA").decode()
        record = z.read("liger_kernel-9.9.9+kindex.slow.dist-info/RECORD").decode()
    assert "Version: 9.9.9+kindex.slow\n" in meta
    assert "_kindex_torch.cuda._sleep(max(1, int(hidden_states.numel() * 6e-5)))" in source
    assert not any(n.startswith("liger_kernel-9.9.9.dist-info/") for n in names)
    assert "liger_kernel/transformers/rms_norm.py,sha256=" in record and "stale" not in record


def test_the_rerun_command_with_device_time_runs_the_campaign_itself(
    tmp_path: Path,
    standin_device: Callable[[], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    from kindex_etl.gpu import command

    standin_device()
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    sdist = build_standin_sdist(tmp_path / "dist", STANDIN_VERSION, STANDIN_DEVICE_SDIST)
    args = parser.parse_args(
        ["--version", STANDIN_VERSION, "--sdist", str(sdist), "--repeats", "1",
         "--kernels", "rms_norm", "--workdir", str(tmp_path / "w"),
         "--output-dir", str(tmp_path / "o"), "--device-time", "--json"]
    )  # fmt: skip

    class Handed(Exception):
        pass

    def flow(**kwargs: Any) -> None:
        raise Handed(kwargs)

    # With Prefect, the command hands device time to the re-run flow (which takes it)...
    with pytest.raises(Handed) as handed:
        command.run_from_args(args, run_flow=flow)
    assert handed.value.args[0]["device_time"] is True
    # ...and without, it runs the campaign itself.
    args.no_prefect = True
    assert command.run_from_args(args, run_flow=flow) == 0
    result = json.loads(capsys.readouterr().out)
    folder = Path(result["runs"][0]["output_dir"])
    data = json.loads((folder / device_time.RESULT_FILE).read_text())
    assert len(data["points"]) == 18 and len(data["protocols"]) == 4
