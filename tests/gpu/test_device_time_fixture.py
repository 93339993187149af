"""The device-time campaigns run on the lent H200 (tests/fixtures/h200_device_time_0.8.5/):
the issue's acceptance figures, recomputed from the runs as they came back, and the docs page
scripts/device_time_report.py makes of them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.gpu import device_ab, device_time

from .conftest import FIXTURES

FIXTURE = FIXTURES / "h200_device_time_0.8.5"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "h200-device-time-0.8.5.md"


def _report() -> Any:
    path = Path(__file__).resolve().parents[2] / "scripts" / "device_time_report.py"
    spec = importlib.util.spec_from_file_location("device_time_report", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def slowdown() -> list[device_ab.Series]:
    return device_ab.load([FIXTURE / "campaign-slow3"])


@pytest.fixture(scope="module")
def release() -> list[device_ab.Series]:
    return device_ab.load([FIXTURE / "campaign-c854", FIXTURE / "campaign-c854b"])


def test_the_docs_page_is_current() -> None:
    assert PAGE.read_text() == _report().render(FIXTURE)


def test_device_time_aa_meets_the_bar_where_upstreams_timer_is_host_noise(
    slowdown: list[device_ab.Series], release: list[device_ab.Series]
) -> None:
    dev = device_ab.aa_summary(device_ab.by_timer(slowdown, "device"))
    up = device_ab.aa_summary(device_ab.by_timer(slowdown, "upstream"))
    assert dev["pairs"] == up["pairs"] == 96
    assert dev["median"] < 0.5 and dev["over2"] <= 5
    assert up["median"] > 5 and up["over2"] > 50
    # 0.8.5 against 0.8.4: the median holds everywhere; dyt's smallest points do not hold
    # the 2 % bar (12 % of its pairs), the other kernels do.
    assert device_ab.aa_summary(device_ab.by_timer(release, "device"))["median"] < 0.5
    for kernel in ("kl_div", "layer_norm", "softmax"):
        sub = [s for s in release if s.timer == "device" and s.kernel == kernel]
        assert device_ab.aa_summary(sub)["over2"] <= 5, kernel
    dyt = [s for s in release if s.timer == "device" and s.kernel == "dyt"]
    assert device_ab.aa_summary(dyt)["over2"] > 5


def test_the_deliberate_slowdown_is_found_with_its_interval_and_aa_raises_nothing(
    slowdown: list[device_ab.Series],
) -> None:
    device = device_ab.by_timer(slowdown, "device")
    model = device_ab.fit_noise(device)
    assert not any(c.alert for c in device_ab.aa_checks(device, model))
    found = {(c.series.provider, c.series.mode, c.series.x): c for c in device_ab.ab(device, model)}
    assert {c.candidate for c in found.values()} == {"0.8.5+kindex.slow"}
    for x in ("1024", "2048", "4096"):
        for mode in ("forward", "full"):
            c = found[("liger", mode, x)]
            assert c.alert and c.low > 1.005, (mode, x)
    # Full passes at T <= 2048: about 3 % (2.65 %), the interval within 1.5 % to 3.5 %.
    for x in ("1024", "2048"):
        c = found[("liger", "full", x)]
        assert 1.015 < c.low < c.ratio < c.high < 1.035
    # The controls carry no spin kernel: liger's backward and every huggingface pass.
    for (provider, mode, _), c in found.items():
        if provider == "huggingface" or mode == "backward":
            assert not c.alert and c.low < 1 < c.high
    # Upstream's timer, its own noise model fitted on its own A/A: it sees none of it.
    upstream = device_ab.by_timer(slowdown, "upstream")
    assert not any(c.alert for c in device_ab.ab(upstream, device_ab.fit_noise(upstream)))


def test_each_point_records_both_timers_and_flags_host_bound_points() -> None:
    data = json.loads(
        (FIXTURE / "campaign-slow3/runs/0.8.5/slow3-0.8.5-r1/device_time.json").read_text()
    )
    points = {(p["point"]["kernel_provider"], p["point"]["kernel_operation_mode"],
               p["point"]["x_value"]): p for p in data["points"]}  # fmt: skip
    liger = points[("liger", "full", "4096")]  # 0.121 ms of device work, 0.94 ms by do_bench
    assert liger["hostBound"] and liger["upstreamOverDevice"] > 3
    assert liger["device"]["method"] == "cuda_graph" and liger["upstream"]["p50_ms"] > 0.05
    hf = points[("huggingface", "forward", "8192")]
    assert not hf["hostBound"] and hf["upstreamOverDevice"] < 1.1
    assert data["hostBoundPoints"] == sum(p["hostBound"] for p in data["points"]) > 0


def test_the_fixture_was_timed_by_todays_protocol_and_the_trial_by_another() -> None:
    current = {
        device_time.digest(device_time.protocol_document(m, mode))
        for m in ("cuda_graph", "cupti")
        for mode in ("forward", "backward", "full")
    }
    for campaign in ("campaign-slow3", "campaign-c854", "campaign-c854b", "campaign-dyt2"):
        seen: set[str] = set()
        for path in (FIXTURE / campaign).glob("runs/*/*/device_time.json"):
            for digest, doc in json.loads(path.read_text())["protocols"].items():
                assert device_time.digest(doc) == digest
                seen.add(digest)
        if campaign == "campaign-dyt2":  # protocol 2: a warm-up before each graph is timed
            assert len(seen - current) == 2
        else:
            assert seen <= current


def test_device_timing_leaves_the_memory_figures_as_upstreams_protocol_gives_them() -> None:
    import csv

    def memory(pattern: str) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for path in FIXTURES.glob(pattern):
            for r in csv.DictReader(path.open()):
                if r["metric_name"] == "memory" and r["kernel_name"] == "rms_norm":
                    out.setdefault((r["kernel_provider"], r["x_value"]), set()).add(r["y_value_50"])
        return out

    # The graphs' memory pools are gone before the scripts measure peak memory: the same bytes
    # as the 0.8.5 campaign measured by upstream's timer alone (2026-12-01).
    with_device = memory("h200_device_time_0.8.5/campaign-slow3/runs/0.8.5/*/benchmark.csv")
    alone = memory("h200_campaign_0.8.5_vs_0.8.4/upstream/reruns/0.8.5/*/benchmark.csv")
    assert len(with_device) == 8 and with_device == {k: alone[k] for k in with_device}
