"""Device-time points as runs of the warehouse (issue 34): the H200 campaigns of
tests/fixtures/h200_device_time_0.8.5/ uploaded as a re-run uploads them (device_time.csv made
from each run's benchmark.csv and device_time.json, as `finish` makes it), ingested, kept
apart from upstream's timer, and analysed with the device-time calibration class. The last
test runs the STAND-IN harness (tests/gpu/standin_device/) through a `--device-time` campaign
into the warehouse."""

from __future__ import annotations

import csv
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from kindex_etl import IngestOptions, ingest, load_catalog, open_warehouse
from kindex_etl.analysis.calibration import default_calibration
from kindex_etl.analysis.run import detect_changes
from kindex_etl.analysis.series import RunSource
from kindex_etl.contracts.digests import digest
from kindex_etl.gpu import device_ab, device_time, run_campaign
from kindex_etl.ingestion.reprocess import reprocess
from kindex_etl.load import layout
from kindex_etl.storage import open_store

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


def _runs(wh: str) -> list[dict[str, Any]]:
    w = open_warehouse(wh, create=False)
    w.refresh()
    table = w.read_table(layout.RUNS)
    assert table is not None
    return table.to_pylist()


def _recorded(campaigns: list[str]) -> dict[tuple[str, ...], dict[str, Any]]:
    """Each timed point's record in device_time.json, by the twin row it measured: (run's
    version, kernel, provider, pass, x, config, upstream's median as the CSV wrote it)."""
    out = {}
    for campaign in campaigns:
        for path in (FIXTURE / campaign / "runs").glob("*/*/device_time.json"):
            for p in json.loads(path.read_text())["points"]:
                if p["protocolDigest"] and p["point"]:
                    pt = p["point"]
                    run, figure = path.parent.name, float(p["upstream"]["p50_ms"])
                    key = (run, pt["kernel_name"], pt["kernel_provider"],
                           pt["kernel_operation_mode"], pt["x_value"],
                           pt["extra_benchmark_config_str"], figure)  # fmt: skip
                    out[key] = p
    return out


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
        run_id = r["source_key"].split("/")[2]
        p = recorded[(run_id, r["kernel"], r["provider"], r["operation_mode"], r["x_value"],
                      r["config"], r["upstream_timer_p50"])]  # fmt: skip
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
        assert all(twin[c] is None for c in DEVICE)
    assert {r["host_bound"] for r in device} == {True, False}


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
    catalog_dir = tmp_path / "catalog"
    shutil.copytree(Path(device_time.PROTOCOLS_FILE).parent, catalog_dir)
    workloads = json.loads((catalog_dir / "workloads.json").read_text())
    workloads["catalogVersion"] += ".1"
    (catalog_dir / "workloads.json").write_text(json.dumps(workloads))
    report = reprocess(wh, catalog=load_catalog(catalog_dir))
    assert report.commit is not None and report.moved == 0 and report.newly_held == 0
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
