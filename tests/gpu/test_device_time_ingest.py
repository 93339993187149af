"""Device-time points as runs of the warehouse (issue 34): the H200 campaigns of
tests/fixtures/h200_device_time_0.8.5/ uploaded as a re-run uploads them (device_time.csv made
from each run's benchmark.csv and device_time.json, as `finish` makes it), ingested, kept
apart from upstream's timer, and analysed with the device-time calibration class. The last
test runs the STAND-IN harness (tests/gpu/standin_device/) through a `--device-time` campaign
into the warehouse; with a throttled stand-in GPU, every device-time run carries the GPU's
clocks, power and throttle state (issue 53), in a warehouse made before those columns too."""

from __future__ import annotations

import csv
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kindex_etl import IngestOptions, ingest, load_catalog, open_warehouse
from kindex_etl.analysis.calibration import default_calibration
from kindex_etl.analysis.run import detect_changes
from kindex_etl.analysis.series import RunSource
from kindex_etl.contracts.digests import digest
from kindex_etl.contracts.upstream import GPU_STATE_COLUMNS
from kindex_etl.gpu import device_ab, device_time, run_campaign
from kindex_etl.ingestion.reprocess import reprocess
from kindex_etl.load import layout
from kindex_etl.maintenance.migrate import migrate
from kindex_etl.storage import open_store
from tests.helpers import documents

from .conftest import (
    BASELINE_VERSION,
    FIXTURES,
    STANDIN_DEVICE_SDIST,
    STANDIN_VERSION,
    build_standin_sdist,
)

FIXTURE = FIXTURES / "h200_device_time_0.8.5"
CALIBRATION = Path(__file__).resolve().parents[2] / "kindex_etl" / "analysis" / "calibration.json"
DEVICE = ("upstream_timer_p50", "upstream_over_device", "host_bound")


def _upload(campaigns: list[str], upstream: Path) -> dict[str, int]:
    """The campaigns' runs at `reruns/<version>/<run-id>/`, each with its device_time.csv."""
    rows = {}
    for campaign in campaigns:
        for run in sorted((FIXTURE / campaign / "runs").glob("*/*")):
            dest = upstream / "reruns" / run.parent.name / run.name
            shutil.copytree(run, dest)
            rows[run.name] = device_time.write_csv(dest) or 0
    return rows


def _ingest(tmp: Path, campaigns: list[str]) -> tuple[str, Any, dict[str, int]]:
    rows = _upload(campaigns, tmp / "up")
    wh = str(tmp / "wh")
    summary = ingest(str(tmp / "up"), wh, IngestOptions(trigger=False))
    return wh, summary, rows


def _documents(wh: str) -> list[dict[str, Any]]:
    """Every BenchmarkRun document the warehouse holds."""
    return documents(Path(wh), layout.RUNS)


def _reprocess_with_a_new_catalog(tmp_path: Path, wh: str) -> None:
    """Reprocess every run under a catalog whose version moved: nothing moves or is held."""
    catalog_dir = tmp_path / "catalog"
    shutil.copytree(Path(device_time.PROTOCOLS_FILE).parent, catalog_dir)
    workloads = json.loads((catalog_dir / "workloads.json").read_text())
    workloads["catalogVersion"] += ".1"
    (catalog_dir / "workloads.json").write_text(json.dumps(workloads))
    report = reprocess(wh, catalog=load_catalog(catalog_dir))
    assert report.commit is not None and report.moved == 0 and report.newly_held == 0


def _runs(wh: str) -> list[dict[str, Any]]:
    w = open_warehouse(wh, create=False)
    w.refresh()
    table = w.read_table(layout.RUNS)
    assert table is not None
    return table.to_pylist()


def _recorded(campaigns: list[str]) -> dict[tuple[str, ...], dict[str, Any]]:
    """Each timed point's record in device_time.json, by the twin row it measured: (run's
    version, kernel, provider, pass, x, config, upstream's median as the CSV wrote it)."""
    return _points(
        path for c in campaigns for path in (FIXTURE / c / "runs").glob("*/*/device_time.json")
    )


def _points(paths: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """`_recorded` over these device_time.json files (each in its run's folder)."""
    out = {}
    for path in paths:
        for p in json.loads(path.read_text())["points"]:
            if p["protocolDigest"] and p["point"]:
                pt = p["point"]
                run, figure = path.parent.name, float(p["upstream"]["p50_ms"])
                key = (run, pt["kernel_name"], pt["kernel_provider"],
                       pt["kernel_operation_mode"], pt["x_value"],
                       pt["extra_benchmark_config_str"], figure)  # fmt: skip
                out[key] = p
    return out


def _point_of(recorded: dict[tuple[str, ...], dict[str, Any]], r: dict[str, Any]) -> Any:
    """The device_time.json point a device-time run was made from."""
    run_id = r["source_key"].split("/")[2]
    return recorded[(run_id, r["kernel"], r["provider"], r["operation_mode"], r["x_value"],
                     r["config"], r["upstream_timer_p50"])]  # fmt: skip


@pytest.fixture(scope="module")
def slow3(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, dict[str, int]]:
    return _ingest(tmp_path_factory.mktemp("slow3"), ["campaign-slow3"])


def test_each_timed_point_is_a_run_of_the_device_protocol_beside_its_twin(
    slow3: tuple[str, Any, dict[str, int]],
) -> None:
    wh, summary, rows = slow3
    # 6 runs of rms_norm: 32 upstream rows each (24 speed, 8 memory) and 24 device points.
    assert summary.quarantined_rows == 0 and summary.duplicate_rows == 0
    assert rows == {name: 24 for name in rows} and len(rows) == 6
    runs = _runs(wh)
    device = [r for r in runs if r["source_metric"].startswith("device_time.")]
    upstream = [r for r in runs if not r["source_metric"].startswith("device_time.")]
    assert len(device) == 144 and len(upstream) == 192
    ids = Counter(r["external_id"] for r in runs)
    assert max(ids.values()) == 1  # speed, memory and device time: every externalId once
    recorded = _recorded(["campaign-slow3"])
    twins = {r["external_id"]: r for r in upstream if r["metric"] == "speed"}
    for r in device:
        p = _point_of(recorded, r)
        # The device figures, the protocol the GPU host recorded, its host-bound verdict.
        assert r["metric"] == "speed" and r["source_p50"] == p["device"]["p50_ms"]
        assert r["latency_ns_median"] == round(p["device"]["p50_ms"] * 1e6)
        assert r["protocol_digest"] == p["protocolDigest"]
        assert r["upstream_over_device"] == p["upstreamOverDevice"]
        assert r["host_bound"] is p["hostBound"]
        # Its twin: the same run, workload, environment and release, upstream's timer.
        head, segment, stamp = r["external_id"].rsplit("/", 2)
        assert segment == f"device-time-{p['device']['method'].replace('_', '-')}-v1"
        twin = twins[f"{head}/{stamp}"]
        for column in ("workload_digest", "environment_digest", "implementation_digest",
                       "liger_version", "observed_at", "provider", "operation_mode"):  # fmt: skip
            assert r[column] == twin[column], column
        assert twin["source_p50"] == r["upstream_timer_p50"]
        assert twin["protocol_digest"] != r["protocol_digest"]
        assert all(twin[c] is None for c in (*DEVICE, *GPU_STATE_COLUMNS))
        # The H200 campaigns were recorded before the launcher read NVML: no GPU state.
        assert "gpu" not in p["device"]
        assert all(r[c] is None for c in GPU_STATE_COLUMNS)
    assert {r["host_bound"] for r in device} == {True, False}
    # Their documents are as before issue 53: no `gpu` in sourceNative.deviceTime.
    for doc in _documents(wh):
        assert "gpu" not in doc["spec"]["sourceNative"].get("deviceTime", {})


def test_device_protocols_are_documents_of_their_own_and_never_in_an_upstream_series(
    slow3: tuple[str, Any, dict[str, int]],
) -> None:
    wh, _, _ = slow3
    w = open_warehouse(wh, create=False)
    w.refresh()
    protocols = w.read_table(layout.PROTOCOLS)
    assert protocols is not None
    docs = {d: json.loads(t) for d, t in zip(protocols.column("digest").to_pylist(),
                                              protocols.column("document").to_pylist(),
                                              strict=True)}  # fmt: skip
    runs = _runs(wh)
    device = {r["protocol_digest"] for r in runs if r["host_bound"] is not None}
    others = {r["protocol_digest"] for r in runs if r["host_bound"] is None}
    assert len(device) == 3 and not device & others  # cuda_graph forward, full; cupti backward
    for d in device:
        assert digest(docs[d]) == d
        assert docs[d]["spec"]["comparability"]["family"] == "kindex_device_time"
        assert docs[d] == device_time.protocol_document(
            device_time.method_for(docs[d]["metadata"]["name"].rsplit("-", 1)[1]),
            docs[d]["metadata"]["name"].rsplit("-", 1)[1],
        )
    # The analysis's series: each holds one timer's runs only.
    for bucket in RunSource.open(open_store(wh)).buckets():
        kinds = bucket.group_by("series_key").aggregate([("protocol_digest", "distinct")])
        for values in kinds.column("protocol_digest_distinct").to_pylist():
            assert len(values) == 1 and (values[0] in device or values[0] in others)


def test_the_device_class_finds_the_injected_slowdown_and_nothing_on_the_controls(
    slow3: tuple[str, Any, dict[str, int]],
) -> None:
    wh, _, _ = slow3
    result = detect_changes(open_store(wh))
    device = [c for c in result.changes if c["series_class"].startswith("device_time/")]
    # Upstream's timer sees nothing in these three runs a side (docs/reruns.md: its A/A median
    # is 11 % here); the controls (huggingface, liger's backward) carry no spin kernel.
    assert len(device) == len(result.changes)
    found = {(c["provider"], c["operation_mode"], c["x_value"]): c for c in device}
    assert set(found) == {("liger", "forward", x) for x in ("1024", "2048", "4096", "8192")} | {
        ("liger", "full", x) for x in ("1024", "2048", "4096")
    }  # full at 8192 moved 0.8 %, under the class's 1 %
    for c in found.values():
        assert c["direction"] == "slower" and c["ratio_low"] > 1.01
        assert (c["before_release"], c["after_release"]) == ("0.8.5", "0.8.5+kindex.slow")
        # One point after the step: the detector's persistence (2 releases) holds it pending,
        # an open state, until a later release confirms it; no run of another release exists.
        assert c["state"] == "pending" and c["after_releases"] == 1
        assert c["baseline_providers"] == ["huggingface"] and abs(c["baseline_ratio"] - 1) < 0.01
    # Full passes at T <= 2048: about 3 % (2.65 %), the interval within 1.5 % to 3.5 %.
    for x in ("1024", "2048"):
        c = found[("liger", "full", x)]
        assert 1.015 < c["ratio_low"] < c["ratio"] < c["ratio_high"] < 1.035


def test_the_device_class_is_fitted_on_the_fixtures_own_aa() -> None:
    cal = default_calibration().class_of("kindex_device_time")
    assert cal is not None and cal.name == "device_time"
    packaged = json.loads(CALIBRATION.read_text())["classes"]["device_time"]
    folders = [FIXTURE / c for c in device_ab.CALIBRATION_CAMPAIGNS]
    fresh = device_ab.calibration_class(folders)
    assert {k: v for k, v in packaged.items() if k != "campaigns"} == {
        k: v for k, v in fresh.items() if k != "campaigns"
    }, "python -m kindex_etl.gpu.device_ab tests/fixtures/h200_device_time_0.8.5 --calibration ..."
    assert cal.settings.min_effect == device_ab.MIN_EFFECT["device"] == 0.01
    assert cal.settings.noise.run_to_run == fresh["noise"]["run_to_run"]
    # Upstream's class keeps its own: a 5 % minimum and a 2 % floor.
    assert default_calibration().settings.min_effect == 0.05
    assert default_calibration().settings.noise.floor > 10 * cal.settings.noise.floor


def test_a_protocol_this_catalog_does_not_define_is_held_back_and_reprocess_keeps_the_rest(
    tmp_path: Path,
) -> None:
    wh, summary, _ = _ingest(tmp_path, ["campaign-dyt2"])
    # Protocol 2 (the reverted trial) changed the graph's warm-up: its graph points are held
    # back, never given protocol 1's digest; its CUPTI (backward) document is protocol 1's.
    held = open_warehouse(wh, create=False)
    held.refresh()
    quarantine = held.read_table(layout.QUARANTINE)
    assert quarantine is not None
    assert set(quarantine.column("reason").to_pylist()) == {"unknown_metric"}
    assert set(quarantine.column("metric_name").to_pylist()) == {"device_time.cuda_graph.v2"}
    assert summary.quarantined_rows == quarantine.num_rows > 0
    runs = _runs(wh)
    device = [r for r in runs if r["host_bound"] is not None]
    assert {r["source_metric"] for r in device} == {"device_time.cupti.v1"}
    assert {r["operation_mode"] for r in device} == {"backward"}

    # Reprocess rebuilds every run from the warehouse: device-time runs stay what they were.
    _reprocess_with_a_new_catalog(tmp_path, wh)
    after = {r["external_id"]: r for r in _runs(wh)}
    for r in device:
        assert {c: after[r["external_id"]][c] for c in (*DEVICE, "protocol_digest")} == {
            c: r[c] for c in (*DEVICE, "protocol_digest")
        }


def test_a_standin_device_time_campaign_uploads_runs_the_ingest_keeps_apart(
    tmp_path: Path, standin_device: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """STAND-IN harness and device (CPU): the re-run's own upload, device_time.csv included."""
    standin_device()
    monkeypatch.setenv("STANDIN_SLOW_VERSION", STANDIN_VERSION)
    sdists = tmp_path / "dist"
    result = run_campaign(
        STANDIN_VERSION, baseline=BASELINE_VERSION, kernels=["rms_norm"], repeats=1,
        sdist=build_standin_sdist(sdists, STANDIN_VERSION, STANDIN_DEVICE_SDIST),
        baseline_sdist=build_standin_sdist(sdists, BASELINE_VERSION, STANDIN_DEVICE_SDIST),
        workdir=tmp_path / "work", upstream=str(tmp_path / "upstream"), device_time=True,
    )  # fmt: skip
    assert result.ok
    for run in result.runs:
        keys = [k.rsplit("/", 1)[-1] for k in run.uploaded_keys]
        assert keys[-2:] == ["benchmark.csv", device_time.CSV_FILE]  # the CSVs last
        table = list(csv.DictReader((Path(run.output_dir) / device_time.CSV_FILE).open()))
        points = json.loads((Path(run.output_dir) / device_time.RESULT_FILE).read_text())
        assert len(table) == len(points["points"]) == 18
    summary = ingest(str(tmp_path / "upstream"), str(tmp_path / "wh"), IngestOptions())
    assert summary.quarantined_rows == 0 and summary.objects_ingested == 4
    runs = _runs(str(tmp_path / "wh"))
    device = [r for r in runs if r["host_bound"] is not None]
    assert len(device) == 36 and len({r["external_id"] for r in runs}) == len(runs)
    # The stand-in host is launch-bound at liger's small points: flagged, not hidden.
    assert any(r["host_bound"] for r in device) and not all(r["host_bound"] for r in device)
    assert pc.sum(pc.is_valid(pc.cast([r["upstream_over_device"] for r in device],
                                      "double"))).as_py() == 36  # fmt: skip
    # The stand-in GPU runs unthrottled at 1,980 MHz: its state is in every device-time run,
    # none of them marked; upstream's timer's runs carry none.
    assert {tuple(r[c] for c in GPU_STATE_COLUMNS) for r in device} == {
        (1980, 2619, 500.0, 50, 0, False)
    }
    assert all(r[c] is None for r in runs if r["host_bound"] is None for c in GPU_STATE_COLUMNS)


MASTER_5AE26C4 = FIXTURES / "warehouse-main-5ae26c4"
# A stand-in GPU at 1,500 MHz under SW power cap (0x4), NVML's reason on the lent H100.
THROTTLED = {"STANDIN_SM_CLOCK": "1500", "STANDIN_THROTTLE": "0x4"}


def _standin_upload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream: Path) -> Any:
    """A `--device-time` campaign of the STAND-IN harness on a throttled stand-in GPU,
    uploaded to `upstream` as a re-run uploads it."""
    for name, value in THROTTLED.items():
        monkeypatch.setenv(name, value)
    sdists = tmp_path / "dist"
    result = run_campaign(
        STANDIN_VERSION, baseline=BASELINE_VERSION, kernels=["rms_norm"], repeats=1,
        sdist=build_standin_sdist(sdists, STANDIN_VERSION, STANDIN_DEVICE_SDIST),
        baseline_sdist=build_standin_sdist(sdists, BASELINE_VERSION, STANDIN_DEVICE_SDIST),
        workdir=tmp_path / "work", upstream=str(upstream), device_time=True,
    )  # fmt: skip
    assert result.ok and len(result.runs) == 2
    return result


def _assert_state_recorded(runs: list[dict[str, Any]], result: Any) -> list[dict[str, Any]]:
    """Every device-time run holds its point's GPU state as device_time.json recorded it."""
    recorded = _points(Path(r.output_dir) / device_time.RESULT_FILE for r in result.runs)
    device = [r for r in runs if r["host_bound"] is not None]
    assert len(device) == len(recorded) == 36
    for r in device:
        p = _point_of(recorded, r)["device"]
        busy = p["gpu"]["busy"]
        mask = 0
        for moment in ("before", "busy", "after"):
            mask |= p["gpu"][moment]["throttleReasons"]
        assert r["gpu_sm_clock_mhz"] == busy["smClockMHz"] == 1500
        assert r["gpu_mem_clock_mhz"] == busy["memClockMHz"] == 2619
        assert r["gpu_power_w"] == busy["powerW"] == 500.0
        assert r["gpu_temperature_c"] == busy["temperatureC"] == 50
        assert r["gpu_throttle_reasons"] == mask == 0x4  # sw_power_cap
        # The point was measured under a slowdown reason: marked, as the launcher marked it.
        assert r["gpu_throttled"] is p["throttled"] is True
    return device


def test_every_device_time_run_carries_the_gpus_clocks_power_and_throttle_state(
    tmp_path: Path, standin_device: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 53: the state device_launch.py reads from NVML per point, in the runs table and
    the run documents; upstream's timer's runs carry none; reprocess keeps it."""
    standin_device()
    result = _standin_upload(tmp_path, monkeypatch, tmp_path / "up")
    wh = str(tmp_path / "wh")
    summary = ingest(str(tmp_path / "up"), wh, IngestOptions(trigger=False))
    assert summary.quarantined_rows == 0
    runs = _runs(wh)
    device = _assert_state_recorded(runs, result)
    assert all(r[c] is None for r in runs if r["host_bound"] is None for c in GPU_STATE_COLUMNS)
    # The documents: sourceNative.deviceTime.gpu on device-time runs, nothing on the others.
    docs = {d["spec"]["sourceNative"]["externalId"]: d for d in _documents(wh)}
    assert len(docs) == len(runs)
    for r in runs:
        native = docs[r["external_id"]]["spec"]["sourceNative"]
        if r["host_bound"] is None:
            assert "deviceTime" not in native
            continue
        assert native["deviceTime"]["gpu"] == {
            "smClockMHz": 1500, "memClockMHz": 2619, "powerW": 500.0, "temperatureC": 50,
            "throttleReasons": 4, "throttled": True,
        }  # fmt: skip
    # Reprocess rebuilds the runs from the warehouse (a catalog change): the state stays.
    _reprocess_with_a_new_catalog(tmp_path, wh)
    after = {r["external_id"]: r for r in _runs(wh)}
    assert len(after) == len(runs)
    for r in device:
        assert {c: after[r["external_id"]][c] for c in GPU_STATE_COLUMNS} == {
            c: r[c] for c in GPU_STATE_COLUMNS
        }
    again = {d["spec"]["sourceNative"]["externalId"]: d for d in _documents(wh)}
    for r in device:
        native = again[r["external_id"]]["spec"]["sourceNative"]["deviceTime"]
        assert native["gpu"]["throttled"] is True and native["gpu"]["smClockMHz"] == 1500


def test_a_warehouse_made_before_the_gpu_columns_reads_and_takes_device_time_runs(
    tmp_path: Path, standin_device: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Main at 5ae26c4's warehouse (no device-time columns at all), migrated to Delta, then
    a throttled device-time campaign appended: the Delta schema gains the gpu columns, its
    files written before read them as null, every reader sees both, through a compaction and
    a reprocess."""
    from deltalake import DeltaTable

    from kindex_etl.contracts import tables
    from kindex_etl.maintenance import compact

    wh, up = tmp_path / "wh", tmp_path / "up"
    shutil.copytree(MASTER_5AE26C4 / "warehouse", wh)
    with monkeypatch.context() as before_53:  # its Delta log as the code before issue 53 made it
        before_53.setattr(tables, "RUN_SCHEMA", pa.schema(
            [f for f in tables.RUN_SCHEMA if f.name not in GPU_STATE_COLUMNS]
        ))  # fmt: skip
        migrate(str(wh))
    before = DeltaTable(str(wh / layout.RUNS))
    assert "gpu_throttled" not in [f.name for f in before.schema().fields]
    old = {r["external_id"] for r in _runs(str(wh))}
    assert len(old) == 41

    standin_device()
    result = _standin_upload(tmp_path, monkeypatch, up)
    ingest(str(up), str(wh), IngestOptions(trigger=False))

    def check() -> None:
        runs = _runs(str(wh))
        _assert_state_recorded(runs, result)
        # Upstream's runs (5ae26c4's, the stand-in's upstream timer): no state.
        others = {r["external_id"] for r in runs if r["host_bound"] is None}
        assert len(others) == len(runs) - 36
        delta_runs = DeltaTable(str(wh / layout.RUNS))
        names = [f.name for f in delta_runs.schema().fields]
        assert set(GPU_STATE_COLUMNS) <= set(names)
        got = delta_runs.to_pyarrow_table(columns=["external_id", *GPU_STATE_COLUMNS]).to_pylist()
        assert sorted(r["external_id"] for r in got) == sorted(r["external_id"] for r in runs)
        marked = [r for r in got if r["gpu_throttled"]]
        assert len(marked) == 36 and {r["gpu_sm_clock_mhz"] for r in marked} == {1500}
        for r in got:
            if r["external_id"] in others:
                assert all(r[c] is None for c in GPU_STATE_COLUMNS)

    check()
    assert old < {r["external_id"] for r in _runs(str(wh))}
    compact(str(wh))
    check()
    # A reprocess reads the old files (no device-time columns) beside the new ones: the
    # device-time runs stay device-time runs, their state kept (and 5ae26c4's held-back dyt
    # rows released, as tests/ingestion/test_reprocess.py has it).
    runs_before = len(_runs(str(wh)))
    assert runs_before == 41 + 2 * (18 + 18)  # each run: 18 upstream-timer, 18 device-time
    report = reprocess(str(wh))
    assert report.runs_after == runs_before + 10
    check()
    # The quarantine's Delta schema gains the device-time columns too (the reprocess rewrote
    # 5ae26c4's held-back row in the new shape): every held row reads through it.
    held = DeltaTable(str(wh / layout.QUARANTINE)).to_pyarrow_table()
    assert set(GPU_STATE_COLUMNS) <= set(held.column_names)
    assert held.column("reason").to_pylist() == ["unknown_gpu"]


def test_a_held_back_device_time_row_keeps_its_own_columns_for_its_replay(
    tmp_path: Path, standin_device: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device-time row held back (a GPU the catalog does not know yet) keeps its CSV's own
    columns in the quarantine; replayed once the catalog knows the GPU, it is a run with its
    upstream figure, host-bound flag and GPU state, as if it had been ingested at once."""
    from kindex_etl import replay
    from kindex_etl.ingestion.replay import open_quarantine

    standin_device()
    monkeypatch.setenv("STANDIN_GPU_NAME", "NVIDIA Z9000 Prototype")
    result = _standin_upload(tmp_path, monkeypatch, tmp_path / "up")
    wh = str(tmp_path / "wh")
    summary = ingest(str(tmp_path / "up"), wh, IngestOptions(trigger=False))
    assert summary.quarantined_by_reason == {"unknown_gpu": 72}
    held = open_quarantine(wh)
    device_rows = held.filter(pc.starts_with(held.column("metric_name"), "device_time."))
    assert device_rows.num_rows == 36
    assert set(device_rows.column("gpu_throttled").to_pylist()) == {"true"}
    assert set(device_rows.column("gpu_sm_clock_mhz").to_pylist()) == {"1500"}
    upstream_rows = held.filter(pc.equal(held.column("metric_name"), "speed"))
    assert set(upstream_rows.column("gpu_throttled").to_pylist()) == {""}

    catalog_dir = tmp_path / "catalog"
    catalog_dir.mkdir()
    gpus = json.loads((Path(device_time.PROTOCOLS_FILE).parent / "gpus.json").read_text())
    gpus["gpus"].append(
        {"match": "NVIDIA Z9000", "vendor": "nvidia", "product": "NVIDIA Z9000",
         "architecture": "sm_200", "family": "Future", "segment": "datacenter"}
    )  # fmt: skip
    (catalog_dir / "gpus.json").write_text(json.dumps(gpus))
    fixed = replay(wh, catalog=load_catalog(catalog_dir))
    assert fixed.runs_written == 72 and open_quarantine(wh).num_rows == 0
    runs = _runs(wh)
    device = _assert_state_recorded(runs, result)
    assert all(r["upstream_timer_p50"] is not None for r in device)
    assert any(r["host_bound"] for r in device) and not all(r["host_bound"] for r in device)
